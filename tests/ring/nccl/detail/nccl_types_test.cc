// Our dtypes and reductions map to NCCL's; unsupported dtypes are ConfigErrors naming the dtype
// and the operation. Runs without a GPU (no NCCL calls).
#include "ring/nccl/detail/nccl_types.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"

namespace aiacc::ring::detail {
namespace {

using ::testing::HasSubstr;

TEST(NcclTypes, MapsEveryReducibleDtype) {
  EXPECT_EQ(nccl_dtype(DType::f32, true, "allreduce"), ncclFloat32);
  EXPECT_EQ(nccl_dtype(DType::f64, true, "allreduce"), ncclFloat64);
  EXPECT_EQ(nccl_dtype(DType::f16, true, "allreduce"), ncclFloat16);
  EXPECT_EQ(nccl_dtype(DType::bf16, true, "allreduce"), ncclBfloat16);
  EXPECT_EQ(nccl_dtype(DType::i32, true, "allreduce"), ncclInt32);
  EXPECT_EQ(nccl_dtype(DType::i64, true, "allreduce"), ncclInt64);
}

TEST(NcclTypes, BytesMoveButDoNotReduce) {
  EXPECT_EQ(nccl_dtype(DType::u8, false, "broadcast"), ncclUint8);
  try {
    nccl_dtype(DType::u8, true, "allreduce");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("allreduce"));
    EXPECT_THAT(e.what(), HasSubstr("u8"));
    EXPECT_THAT(e.what(), HasSubstr("bf16"));  // lists the supported ones
  }
}

TEST(NcclTypes, MapsReductions) {
  EXPECT_EQ(nccl_reduce_op(ReduceOp::kSum), ncclSum);
  EXPECT_EQ(nccl_reduce_op(ReduceOp::kAverage), ncclAvg);
}

}  // namespace
}  // namespace aiacc::ring::detail
