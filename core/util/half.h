// fp16 (IEEE binary16) and bf16 storage types with round-to-nearest-even conversion from float.
// Arithmetic happens in float: these are storage and wire formats.
#pragma once

#include <cstdint>
#include <cstring>

namespace aiacc {

struct Half {
  std::uint16_t bits = 0;
};
struct BFloat16 {
  std::uint16_t bits = 0;
};

inline std::uint32_t float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
inline float bits_float(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline BFloat16 to_bf16(float value) {
  std::uint32_t bits = float_bits(value);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) {
    return BFloat16{static_cast<std::uint16_t>((bits >> 16) | 0x40)};  // quiet NaN stays NaN
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return BFloat16{static_cast<std::uint16_t>(bits >> 16)};
}
inline float to_float(BFloat16 value) { return bits_float(std::uint32_t(value.bits) << 16); }

// Float to binary16, round to nearest even; overflow gives infinity, tiny values subnormals.
inline Half to_half(float value) {
  std::uint32_t x = float_bits(value);
  std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return Half{static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u))};
  }
  if (abs >= 0x477ff000u) return Half{static_cast<std::uint16_t>(sign | 0x7c00u)};  // >= 65520
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (abs < 0x33000000u) return Half{sign};  // < 2^-25 rounds to zero
    // value / 2^-24 = mantissa * 2^(exponent - 126): shift the 24-bit mantissa right.
    std::uint32_t mantissa = (abs & 0x007fffffu) | 0x00800000u;
    int shift = 126 - static_cast<int>(abs >> 23);
    std::uint32_t half_mantissa = mantissa >> shift;
    std::uint32_t remainder = mantissa & ((1u << shift) - 1);
    std::uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half_mantissa & 1u))) ++half_mantissa;
    return Half{static_cast<std::uint16_t>(sign | half_mantissa)};
  }
  std::uint32_t rounded = abs - 0x38000000u;  // rebias exponent 127 -> 15
  rounded += 0xfffu + ((rounded >> 13) & 1u);
  return Half{static_cast<std::uint16_t>(sign | (rounded >> 13))};
}

inline float to_float(Half value) {
  std::uint32_t sign = std::uint32_t(value.bits & 0x8000u) << 16;
  std::uint32_t exponent = (value.bits >> 10) & 0x1fu;
  std::uint32_t mantissa = value.bits & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);  // m * 2^-24
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace aiacc
