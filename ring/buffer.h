// Buffer: the memory a collective works on in place, `count` elements of `dtype` in host memory.
// Non-owning: the caller keeps it alive (and does not touch it) while a collective runs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "ring/reduce_op.h"

namespace aiacc::ring {

struct Buffer {
  void* data = nullptr;
  std::int64_t count = 0;
  DType dtype = DType::f32;

  std::size_t element_bytes() const { return dtype_size(dtype); }
  std::size_t bytes() const { return static_cast<std::size_t>(count) * element_bytes(); }
  std::byte* at(std::int64_t element) const {
    return static_cast<std::byte*>(data) + static_cast<std::size_t>(element) * element_bytes();
  }
  static Buffer of(Tensor& tensor) { return {tensor.raw_data(), tensor.numel(), tensor.dtype()}; }
};

// How an allreduce reduces and what it sends.
struct AllreduceSpec {
  ReduceOp op = ReduceOp::kSum;
  WireType wire = WireType::kNative;
  // Pipelining unit on the wire: each ring step moves its segment in chunks of this many bytes,
  // so reducing one chunk overlaps sending the next. 1 MiB: large enough that per-message costs
  // (~10 us) vanish, small enough to pipeline 4 MiB segments; tests use tiny chunks.
  std::int64_t chunk_bytes = 1 << 20;
};

}  // namespace aiacc::ring
