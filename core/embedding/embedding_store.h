// Where the rows of a sparse embedding table live. Models never own huge tables: they ask a
// store for the rows a batch touches (pull) and hand back gradient rows (push); the store runs
// the sparse optimiser on exactly those rows. The trainer decides per table which store serves
// it: a local in-process store, or the sharded parameter servers (shared/DESIGN.md §3, §5).
// Ids are 64-bit (hashed features, unbounded vocabulary); rows are created on first touch with a
// deterministic initial value computed from (id, seed), so a restarted store recreates them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace aiacc {

struct EmbeddingTableSpec {
  std::string name;            // e.g. "deep.C7": unique within the model
  std::int64_t dim = 0;        // floats per row
  double init_scale = 0.05;    // new rows start uniform(-init_scale, init_scale)
  std::uint64_t seed = 0;      // with the id, determines a new row's initial value
  std::int64_t max_rows = 0;   // > 0: the model's ids lie in [0, max_rows) (auto placement's bound)
};

class EmbeddingStore {
 public:
  virtual ~EmbeddingStore() = default;
  virtual const EmbeddingTableSpec& spec() const = 0;

  // Copies the current rows of `ids` into `rows` ([ids.size(), dim], row-major), creating
  // missing rows. `ids` should be unique (callers de-duplicate). Blocks until the rows are there.
  virtual void pull(std::span<const std::int64_t> ids, float* rows) = 0;

  // Applies the optimiser to the rows of `ids` with gradient rows `grads` ([ids.size(), dim]) at
  // learning rate `lr`. `ids` must be unique. Blocks until applied (a remote store may return
  // earlier under asynchronous consistency and says so in its own contract).
  virtual void push(std::span<const std::int64_t> ids, const float* grads, double lr) = 0;

  // Rows currently held (for logs and tests).
  virtual std::int64_t num_rows() const = 0;

  // While on, pull() reads without changing the store: missing rows get the value a pull would
  // create, but none is created (nor counted towards admission or eviction, nor served from a
  // cache). An evaluation reads a model; training goes on as if it had not. Stores without
  // the distinction keep this default (their reads may create rows).
  virtual void set_read_only(bool /*on*/) {}

  // A worker-side cache of hot rows in numbered slots (ps::RemoteEmbeddingStore with
  // cache_rows) that a device may mirror: keeping a copy of every slot there, a step copies over
  // only the rows its slots received since the last step, not every row it pulled. Stores
  // without such a cache keep these defaults. One mirror per store: taking the written slots
  // forgets them.
  // Slots of the cache (0: none).
  virtual std::int64_t cache_slots() const { return 0; }
  // With a cache: `slot_of` = the slot of each id of the last pull(), in its order, and every
  // slot written since the previous call (each once; the first call: since the store was made
  // or its cache emptied) appended to `written` with its row now appended to `rows`
  // ([written, dim]); a slot the last pull() reads was written in this call or an earlier one.
  // With `every_slot`, every slot is listed (a mirror that is new, or lost what an earlier
  // call gave it). Returns false, touching nothing, without a cache, and where the last pull()
  // did not go through it (a read-only pull of an evaluation: its rows are the pull's own).
  virtual bool take_cache_slots(std::vector<std::int32_t>& slot_of, std::vector<std::int32_t>& written,
                                std::vector<float>& rows, bool every_slot) {
    (void)slot_of, (void)written, (void)rows, (void)every_slot;
    return false;
  }

  // Checkpointing: every row held, as named tensors "<table>.ids" (i64 [R]), "<table>.values"
  // (f32 [R, dim]) and "<table>.state" (f32 [R, S], the optimiser's per-row state), and the
  // inverse, which replaces the store's contents. Throws DataError on inconsistent input.
  virtual std::vector<std::pair<std::string, Tensor>> save_rows() const = 0;
  virtual void load_rows(const std::vector<std::pair<std::string, Tensor>>& rows) = 0;
};

// Creates (or connects to) the store of one table; the trainer provides it to models.
using EmbeddingStoreFactory =
    std::function<std::shared_ptr<EmbeddingStore>(const EmbeddingTableSpec& spec)>;

}  // namespace aiacc
