// De-duplication of a batch's 64-bit ids: the unique ids in first-seen order and, for every
// position, its index into that list. Used by the embedding bag (gather each row once) and by
// the parameter-server client (pull and push each row once per step, shared/DESIGN.md §3).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace aiacc::kernels {

struct DedupResult {
  std::vector<std::int64_t> unique_ids;  // [U], in order of first appearance
  std::vector<std::int64_t> inverse;     // [P]: ids[p] == unique_ids[inverse[p]]
};

// Reusable de-duplicator: keeps its open-addressing hash table between calls, so a training
// loop allocates only when a batch has more ids than any before. Single-threaded; one
// instance per thread.
class IdDeduplicator {
 public:
  // Fills `out` (previous contents replaced, capacity reused) for `ids` [P]. Any int64 value is
  // a valid id. O(P) expected time.
  void run(std::span<const std::int64_t> ids, DedupResult& out);

 private:
  // Id and index share a slot: one cache line per probe. A slot belongs to this run only when
  // it carries this run's stamp, so nothing is cleared between runs (a 100k-id request's table
  // is 4 MiB); the stamps are wiped only when the counter wraps.
  struct Slot {
    std::int64_t id = 0;
    std::int32_t index = 0;  // into unique_ids
    std::uint32_t stamp = 0;  // the run that wrote the slot; 0: never
  };
  std::vector<Slot> slots_;
  std::uint32_t stamp_ = 0;
};

// One-shot convenience wrapper around IdDeduplicator::run.
DedupResult deduplicate_ids(std::span<const std::int64_t> ids);

}  // namespace aiacc::kernels
