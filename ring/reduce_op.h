// The closed sets every collective backend shares: the reduction (sum or average) and the
// type gradients travel in on the wire. Parsed from config strings with a plain factory.
#pragma once

#include <string>
#include <string_view>

namespace aiacc::ring {

enum class ReduceOp { kSum, kAverage };

// What a floating-point buffer is converted to while it travels; accumulation is always in the
// buffer's own type (fp32 for gradients). kNative sends the buffer's type unchanged.
enum class WireType { kNative, kF16, kBf16 };

const char* reduce_op_name(ReduceOp op);
const char* wire_type_name(WireType wire);
// "sum" | "average" (also "avg", "mean"); ConfigError naming `key`, the value and the allowed ones.
ReduceOp parse_reduce_op(std::string_view text, std::string_view key = "reduce_op");
// "native" | "fp32" (same as native for fp32 buffers) | "fp16" | "bf16".
WireType parse_wire_type(std::string_view text, std::string_view key = "wire_dtype");

}  // namespace aiacc::ring
