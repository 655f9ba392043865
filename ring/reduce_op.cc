#include "ring/reduce_op.h"

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::ring {

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "average"; }

const char* wire_type_name(WireType wire) {
  switch (wire) {
    case WireType::kNative: return "native";
    case WireType::kF16: return "fp16";
    case WireType::kBf16: return "bf16";
  }
  return "?";
}

ReduceOp parse_reduce_op(std::string_view text, std::string_view key) {
  if (text == "sum") return ReduceOp::kSum;
  if (text == "average" || text == "avg" || text == "mean") return ReduceOp::kAverage;
  throw ConfigError(fmt::format("{}: unknown reduction '{}'; expected sum or average", key, text));
}

WireType parse_wire_type(std::string_view text, std::string_view key) {
  if (text == "native" || text == "fp32" || text == "f32") return WireType::kNative;
  if (text == "fp16" || text == "f16" || text == "half") return WireType::kF16;
  if (text == "bf16" || text == "bfloat16") return WireType::kBf16;
  throw ConfigError(fmt::format("{}: unknown wire type '{}'; expected native, fp16 or bf16", key, text));
}

}  // namespace aiacc::ring
