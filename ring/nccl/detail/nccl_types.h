// Our dtypes and reductions in NCCL's terms: a closed mapping with an error that names the value
// and the supported ones. No NCCL calls, so it is unit-tested without a GPU.
#pragma once

#include <nccl.h>

#include <string_view>

#include "core/tensor.h"
#include "ring/reduce_op.h"

namespace aiacc::ring::detail {

// f32, f64, f16, bf16, i32, i64 always; u8 only where `reducing` is false (broadcast, allgather:
// bytes move unchanged). ConfigError naming the dtype, `op` and the supported dtypes otherwise.
ncclDataType_t nccl_dtype(DType dtype, bool reducing, std::string_view op);

// kSum -> ncclSum, kAverage -> ncclAvg (sum divided by the world size inside NCCL; integer
// buffers are divided with truncation).
ncclRedOp_t nccl_reduce_op(ReduceOp op);

}  // namespace aiacc::ring::detail
