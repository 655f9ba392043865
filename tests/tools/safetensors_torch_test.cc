// Interoperability: a checkpoint-style safetensors file written here is read by PyTorch
// (tests/tools/safetensors_torch_check.py, a spec-level reader built on torch.frombuffer) with
// the same names, dtypes, shapes and values (compared through per-tensor sums). Exits 77 (Meson:
// SKIP) when python3 or torch is missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "tests/core/io/temp_dir.h"
#include "tests/testing/process.h"

namespace aiacc::io {
namespace {

constexpr int kSkip = 77;

double sum_of(const Tensor& t) {
  double sum = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::f32: sum += t.data<float>()[i]; break;
      case DType::f64: sum += t.data<double>()[i]; break;
      case DType::f16: sum += to_float(t.data<Half>()[i]); break;
      case DType::bf16: sum += to_float(t.data<BFloat16>()[i]); break;
      case DType::i64: sum += static_cast<double>(t.data<std::int64_t>()[i]); break;
      case DType::i32: sum += t.data<std::int32_t>()[i]; break;
      case DType::u8: sum += t.data<std::uint8_t>()[i]; break;
    }
  }
  return sum;
}

const char* torch_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i64: return "int64";
    case DType::i32: return "int32";
    case DType::u8: return "uint8";
  }
  return "?";
}

TEST(SafetensorsTorchTest, PyTorchReadsOurFileWithSameNamesAndValues) {
  const std::string python = aiacc::testing::python_with({"torch"});
  if (python.empty())
    GTEST_SKIP() << "no python3 with torch found (tried python3, /usr/bin/python3)";
  aiacc::testing::TempDir dir;
  const std::string path = (dir / "model.safetensors").string();
  std::vector<BFloat16> bf{to_bf16(1.5f), to_bf16(-3.25f), to_bf16(1024.0f)};
  std::vector<Half> half{to_half(0.5f), to_half(-7.0f)};
  const NamedTensors tensors{
      {"conv1.weight",
       Tensor::from_vector<float>({0.5f, -1.25f, 3.0f, 1e-3f, 7, 8}, Shape{1, 2, 3})},
      {"fc.bias", Tensor::from_vector<double>({1e-10, 2.5, -4}, Shape{3})},
      {"bn1.num_batches_tracked", Tensor::from_vector<std::int64_t>({123}, Shape{})},
      {"embedding.ids", Tensor::from_vector<std::int64_t>({1LL << 40, -5, 9}, Shape{3})},
      {"embedding.weight_bf16", Tensor::from_vector<BFloat16>(bf, Shape{3, 1})},
      {"half", Tensor::from_vector<Half>(half, Shape{2})},
      {"counts", Tensor::from_vector<std::int32_t>({-1, 2, 3}, Shape{3})},
      {"mask", Tensor::from_vector<std::uint8_t>({1, 0, 255}, Shape{3})},
      {"scale", Tensor::from_vector<float>({2.0f}, Shape{})},
      {"empty", Tensor::zeros(Shape{0, 3})},
  };
  write_safetensors(path, tensors, {{"format", "pt"}, {"aiacc.step", "42"}});

  aiacc::testing::CommandResult outcome = aiacc::testing::run_command(python + " " + (aiacc::testing::source_root() / "tests/tools/safetensors_torch_check.py").string() + " " + path + " 2>&1");
  if (outcome.status == kSkip) GTEST_SKIP() << outcome.output;
  ASSERT_EQ(outcome.status, 0) << outcome.output;
  nlohmann::json result = nlohmann::json::parse(outcome.output);
  EXPECT_EQ(result["metadata"]["aiacc.step"], "42");
  ASSERT_EQ(result["tensors"].size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(result["tensors"].contains(name));
    const auto& got = result["tensors"][name];
    EXPECT_EQ(got["dtype"], torch_dtype(tensor.dtype()));
    EXPECT_EQ(got["shape"].get<std::vector<std::int64_t>>(), tensor.shape().dims());
    EXPECT_DOUBLE_EQ(got["sum"].get<double>(), sum_of(tensor));
  }
}

}  // namespace
}  // namespace aiacc::io

// Own main (instead of gtest_main) so that a skipped run exits 77 and Meson shows SKIP.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int status = RUN_ALL_TESTS();
  const auto* unit = ::testing::UnitTest::GetInstance();
  if (status == 0 && unit->skipped_test_count() > 0 && unit->successful_test_count() == 0) {
    return 77;
  }
  return status;
}
