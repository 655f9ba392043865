// How one allreduce buffer is cut into contiguous parts, one per NCCL stream (DESIGN §4
// multi-stream). Pure host arithmetic, so it is unit-tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace aiacc::ring::detail {

// Elements [offset, offset + count) of the buffer go to one stream.
struct StreamPart {
  std::int64_t offset = 0;
  std::int64_t count = 0;
  bool operator==(const StreamPart&) const = default;
};

// NCCL buffers stay 256-byte aligned at every part boundary (measured from the buffer start),
// which keeps NCCL on its vectorised load/store paths.
inline constexpr std::size_t kPartAlignmentBytes = 256;

// Throws ConfigError unless there is one weight per stream (`streams` of them), each finite and
// >= 0, with a positive sum. The message names the offending weight.
void validate_stream_weights(std::span<const double> weights, std::size_t streams);

// Splits `count` elements of `element_size` bytes into weights.size() contiguous parts, in
// order, part k's size proportional to weights[k]. Every boundary but the last is a multiple of
// `alignment_bytes` (rounded to the nearest multiple), so parts may be empty (small buffers,
// zero weights); the parts always cover [0, count) exactly. Deterministic: identical inputs
// give identical parts on every rank, which NCCL needs (all ranks must issue the same
// collectives on each communicator). Requires valid weights (validate_stream_weights), count
// >= 0 and element_size dividing alignment_bytes; InternalError otherwise.
std::vector<StreamPart> split_by_weights(std::int64_t count, std::size_t element_size,
                                         std::span<const double> weights,
                                         std::size_t alignment_bytes = kPartAlignmentBytes);

}  // namespace aiacc::ring::detail
