// RemoteEmbeddingStore: the EmbeddingStore (core/embedding) of a table served by the parameter
// servers, so models and the trainer use local and remote tables alike. Each pull() and
// push() is one batched request per shard through a shared PsClient; the store counts this
// worker's steps itself (a step ends with its push), which drives the table's consistency.
//
// Prefetch: after a step's push, prefetch(next ids) starts pulling the next batch's rows while
// the current step finishes (dense all-reduce, optimiser); the next pull() with the same ids
// takes them from the ticket. A prefetch is only used when no push happened in between and,
// for a sync table, when it was not sent while this worker's last push still waited for the
// other workers' (push_async() without wait_push()), so its rows are exactly what a blocking
// pull would return under every consistency mode.
//
// Hot-row cache (TableOptions::cache_rows > 0): pull() and prefetch() plan each batch over an
// embedding::HotRowCache and ask the shards only for the rows it does not hold fresh enough;
// kept rows live in a host table of cache_rows x dim floats, from which pull() copies the batch.
// A device may mirror that table (take_cache_slots(): Wide&Deep's bags on a GPU do).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/embedding/embedding_store.h"
#include "core/embedding/hot_row_cache.h"
#include "ps/client.h"

namespace aiacc::ps {

// Thread-safety: pull, push and prefetch of one store are serialised by a mutex (a model
// calls them from its training thread); stores of several tables may share the client.
class RemoteEmbeddingStore final : public EmbeddingStore {
 public:
  // Registers `config` on every shard (blocking; see PsClient::create_table). ConfigError for a
  // cache staleness the table's consistency does not allow (sync: only 0).
  RemoteEmbeddingStore(std::shared_ptr<PsClient> client, const TableConfig& config);
  ~RemoteEmbeddingStore() override;

  const EmbeddingTableSpec& spec() const override { return config_.spec; }
  // Blocks until the rows are here (bounded staleness: also until the slowest worker is at
  // most s steps behind this one). Ids should be unique (EmbeddingStore's contract; a repeated
  // id is fetched twice, still correctly).
  void pull(std::span<const std::int64_t> ids, float* rows) override;
  // Blocks until every shard applied the update (sync: until all workers pushed this step).
  // Ids must be unique (EmbeddingStore's contract): the client does not de-duplicate them
  // again (ps::RequestIds::unique), so repeats would not be summed. Ends this worker's step.
  void push(std::span<const std::int64_t> ids, const float* grads, double lr) override;
  // Starts pulling `ids` for the next pull() (copied; returns at once).
  void prefetch(std::span<const std::int64_t> ids);
  // push() without the wait: sends the row gradients (copied) and returns, ending this
  // worker's step; wait_push() blocks until the shards applied them (rethrowing their error).
  // A trainer pushes every table this way and then waits once, so the tables' requests (and,
  // under sync consistency, their per-step barriers) overlap instead of queueing. A pull or
  // another push first waits for the push in flight.
  void push_async(std::span<const std::int64_t> ids, const float* grads, double lr);
  void wait_push();

  // Rows held by all shards for this table.
  std::int64_t num_rows() const override;
  // Every row from every shard (LocalEmbeddingStore's names and id order), and the inverse.
  std::vector<std::pair<std::string, Tensor>> save_rows() const override;
  void load_rows(const std::vector<std::pair<std::string, Tensor>>& rows) override;

  // The hot-row cache's counts (all zero without a cache).
  embedding::HotRowCacheStats cache_stats() const;
  // While on, pull() reads the shards' rows as they are now, past the hot-row cache and any
  // prefetch, and the shards create no rows and count nothing (PsClient::pull's read_only): an
  // evaluation scores the model the checkpoint of this step holds, and training goes on as if
  // it had not run.
  void set_read_only(bool on) override;
  // Its slots, for a device mirror (EmbeddingStore's contract).
  std::int64_t cache_slots() const override { return config_.options.cache_rows > 0 ? config_.options.cache_rows : 0; }
  bool take_cache_slots(std::vector<std::int32_t>& slot_of, std::vector<std::int32_t>& written,
                        std::vector<float>& rows, bool every_slot) override;

  std::uint64_t step() const;
  // Tells the store where a resumed worker is (steps completed), before its first push.
  void set_step(std::uint64_t step);
  PsClient& client() { return *client_; }

 private:
  std::shared_ptr<PsClient> client_;
  TableConfig config_;
  mutable std::mutex mutex_;
  std::uint64_t step_ = 0;  // pushes done: the step this worker is on
  bool read_only_ = false;
  struct Prefetch {
    std::vector<std::int64_t> ids;
    std::vector<float> rows;  // without a cache: every id's row; with one: plan.fetch_ids' rows
    Ticket ticket;
    std::uint64_t step = 0;
    embedding::RowCachePlan plan;  // with a cache
    // Sent while this worker's push to a sync table was not yet applied (it waits for every
    // worker's push of the step), so its rows may predate that push: never used.
    bool before_sync_push = false;
  };
  // With a cache: plans `ids` for this step (ConfigError naming the table and the option when
  // the batch has more unique rows than the cache).
  embedding::RowCachePlan plan_batch(std::span<const std::int64_t> ids);
  // Sends a pull of `ids` into `rows` for this step (a failure empties the cache, whose plan
  // already counts the rows as held).
  Ticket start_pull(std::span<const std::int64_t> ids, float* rows);
  // Waits for a prefetch and, with a cache, puts its fetched rows into their slots (its plan
  // already counts them as held, whether or not the prefetch is used).
  void settle(Prefetch& p);
  void copy_from_slots(const embedding::RowCachePlan& plan, float* rows) const;
  void reset_cache();

  std::unique_ptr<Prefetch> prefetch_;
  Ticket pending_push_;  // push_async() not yet waited for
  std::unique_ptr<embedding::HotRowCache> cache_;  // null without cache_rows
  std::vector<float> cached_rows_;                 // [cache_rows, dim]: the slots' rows
  // For take_cache_slots(): the last pull's slots, and the slots written since the last take.
  std::vector<std::int32_t> last_slot_of_;
  std::vector<std::int32_t> written_slots_;
  std::vector<std::uint8_t> slot_written_;  // [cache_rows]: listed in written_slots_
};

// A factory serving every table from the parameter servers behind `client`, with the sparse
// optimiser `optimizer` and the consistency/admission options `options`.
EmbeddingStoreFactory ps_embedding_store_factory(std::shared_ptr<PsClient> client,
                                                 const optim::OptimizerOptions& optimizer,
                                                 const TableOptions& options);

}  // namespace aiacc::ps
