#include "ring/nccl/detail/nccl_types.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/error.h"

namespace aiacc::ring::detail {

ncclDataType_t nccl_dtype(DType dtype, bool reducing, std::string_view op) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8:
      if (!reducing) return ncclUint8;
      break;
  }
  throw ConfigError(
      fmt::format("NCCL {} does not support dtype {}; supported: f32, f64, f16, "
                  "bf16, i32, i64{}",
                  op, dtype_name(dtype), reducing ? "" : ", u8"));
}

ncclRedOp_t nccl_reduce_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAverage: return ncclAvg;
  }
  AIACC_CHECK(false, "unknown ReduceOp {}", static_cast<int>(op));
  return ncclSum;  // unreachable: AIACC_CHECK(false) throws
}

}  // namespace aiacc::ring::detail
