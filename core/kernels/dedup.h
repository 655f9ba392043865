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
  std::vector<std::int64_t> keys_;   // [capacity] id stored in a slot
  std::vector<std::int32_t> slots_;  // [capacity] index into unique_ids, -1 when empty
};

// One-shot convenience wrapper around IdDeduplicator::run.
DedupResult deduplicate_ids(std::span<const std::int64_t> ids);

}  // namespace aiacc::kernels
