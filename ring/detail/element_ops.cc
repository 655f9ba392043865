// Element-wise kernels for the collectives. fp16 conversion uses F16C where the build targets
// it (x86-64-v3 and up), else the scalar round-to-nearest-even of core/util/half.h; both give
// the same bits for every finite input.
#include "ring/detail/element_ops.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/util/half.h"

namespace aiacc::ring::detail {
namespace {

template <class T>
T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

template <class T>
void accumulate_native(T* buffer, const std::byte* wire, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) buffer[i] += load<T>(wire + i * sizeof(T));
}

// fp16 wire <-> f32 buffer.
void accumulate_f16(float* buffer, const std::byte* wire, std::size_t count) {
  std::size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wire + 2 * i));
    _mm256_storeu_ps(buffer + i, _mm256_add_ps(_mm256_loadu_ps(buffer + i), _mm256_cvtph_ps(h)));
  }
#endif
  for (; i < count; ++i) buffer[i] += to_float(load<Half>(wire + 2 * i));
}

void decode_f16(float* buffer, const std::byte* wire, std::size_t count) {
  std::size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wire + 2 * i));
    _mm256_storeu_ps(buffer + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < count; ++i) buffer[i] = to_float(load<Half>(wire + 2 * i));
}

// Returns false if a finite input overflowed to infinity.
bool encode_f16(const float* buffer, std::byte* wire, std::size_t count) {
  std::size_t i = 0;
  bool finite_in = true, finite_out = true;
#if defined(__F16C__)
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 max_half = _mm256_set1_ps(65504.0f);
  __m256 over = _mm256_setzero_ps();
  for (; i + 8 <= count; i += 8) {
    const __m256 x = _mm256_loadu_ps(buffer + i);
    // |x| > 65504 (rounds to inf, or is inf) or NaN: flagged below by the exact check.
    over = _mm256_or_ps(over, _mm256_cmp_ps(_mm256_and_ps(x, abs_mask), max_half, _CMP_NLE_UQ));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(wire + 2 * i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  if (_mm256_movemask_ps(over) != 0) {
    // Rare: recheck this part exactly (values in (65504, 65520) still round to 65504).
    for (std::size_t j = 0; j < i; ++j) {
      finite_in = finite_in && std::isfinite(buffer[j]);
      finite_out = finite_out && (load<Half>(wire + 2 * j).bits & 0x7c00u) != 0x7c00u;
    }
  }
#endif
  for (; i < count; ++i) {
    const Half h = to_half(buffer[i]);
    std::memcpy(wire + 2 * i, &h, sizeof h);
    finite_in = finite_in && std::isfinite(buffer[i]);
    finite_out = finite_out && (h.bits & 0x7c00u) != 0x7c00u;
  }
  return finite_out || !finite_in;
}

// bf16: the top half of a float, rounded to nearest even; written branch-free so it vectorises.
void accumulate_bf16(float* buffer, const std::byte* wire, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    buffer[i] += bits_float(std::uint32_t{load<std::uint16_t>(wire + 2 * i)} << 16);
  }
}

void decode_bf16(float* buffer, const std::byte* wire, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    buffer[i] = bits_float(std::uint32_t{load<std::uint16_t>(wire + 2 * i)} << 16);
  }
}

bool encode_bf16(const float* buffer, std::byte* wire, std::size_t count) {
  bool ok = true;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t bits = float_bits(buffer[i]);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const auto out = static_cast<std::uint16_t>(nan ? ((bits >> 16) | 0x40u) : rounded);
    std::memcpy(wire + 2 * i, &out, sizeof out);
    // Overflow: a finite input whose rounding reached the all-ones exponent.
    ok = ok && !((bits & 0x7f800000u) != 0x7f800000u && (out & 0x7f80u) == 0x7f80u);
  }
  return ok;
}

template <class Storage>
void accumulate_storage(Storage* buffer, const std::byte* wire, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const float sum = to_float(buffer[i]) + to_float(load<Storage>(wire + i * sizeof(Storage)));
    if constexpr (std::is_same_v<Storage, Half>) {
      buffer[i] = to_half(sum);
    } else {
      buffer[i] = to_bf16(sum);
    }
  }
}

template <class T>
void scale_typed(T* buffer, std::size_t count, double factor) {
  if constexpr (std::is_integral_v<T>) {
    // An average's factor is 1/n: divide by n. Multiplying by the double 1/n truncates exact
    // quotients (49 * (1.0 / 49) is 0.9999999999999999) and rounds i64 sums above 2^53.
    const double inverse = 1.0 / factor;
    const auto divisor = static_cast<T>(std::llround(inverse));
    if (divisor >= 1 && std::abs(inverse - static_cast<double>(divisor)) < 1e-6) {
      for (std::size_t i = 0; i < count; ++i) buffer[i] = static_cast<T>(buffer[i] / divisor);
      return;
    }
    for (std::size_t i = 0; i < count; ++i) buffer[i] = static_cast<T>(static_cast<double>(buffer[i]) * factor);
  } else {
    const auto f = static_cast<T>(factor);
    for (std::size_t i = 0; i < count; ++i) buffer[i] *= f;
  }
}

template <class Storage>
void scale_storage(Storage* buffer, std::size_t count, double factor) {
  const auto f = static_cast<float>(factor);
  for (std::size_t i = 0; i < count; ++i) {
    if constexpr (std::is_same_v<Storage, Half>) {
      buffer[i] = to_half(to_float(buffer[i]) * f);
    } else {
      buffer[i] = to_bf16(to_float(buffer[i]) * f);
    }
  }
}

}  // namespace

std::size_t WireFormat::wire_bytes() const { return converts() ? 2 : dtype_size(buffer); }

WireFormat make_wire_format(DType dtype, WireType wire, const char* what) {
  switch (dtype) {
    case DType::f32: case DType::f64: case DType::f16: case DType::bf16: case DType::i32: case DType::i64:
      break;
    default:
      throw ConfigError(fmt::format("{}: cannot reduce {} buffers (supported: f32, f64, f16, bf16, i32, i64)",
                                    what, dtype_name(dtype)));
  }
  if (wire != WireType::kNative && dtype != DType::f32) {
    throw ConfigError(fmt::format("{}: wire type {} applies to f32 buffers only, not {}", what,
                                  wire_type_name(wire), dtype_name(dtype)));
  }
  return WireFormat{dtype, wire};
}

void accumulate(const WireFormat& format, void* buffer, const std::byte* wire, std::size_t count) {
  if (format.wire == WireType::kF16) return accumulate_f16(static_cast<float*>(buffer), wire, count);
  if (format.wire == WireType::kBf16) return accumulate_bf16(static_cast<float*>(buffer), wire, count);
  switch (format.buffer) {
    case DType::f32: return accumulate_native(static_cast<float*>(buffer), wire, count);
    case DType::f64: return accumulate_native(static_cast<double*>(buffer), wire, count);
    case DType::i32: return accumulate_native(static_cast<std::int32_t*>(buffer), wire, count);
    case DType::i64: return accumulate_native(static_cast<std::int64_t*>(buffer), wire, count);
    case DType::f16: return accumulate_storage(static_cast<Half*>(buffer), wire, count);
    case DType::bf16: return accumulate_storage(static_cast<BFloat16*>(buffer), wire, count);
    default: throw InternalError("accumulate: unsupported dtype");
  }
}

void decode(const WireFormat& format, void* buffer, const std::byte* wire, std::size_t count) {
  if (format.wire == WireType::kF16) return decode_f16(static_cast<float*>(buffer), wire, count);
  if (format.wire == WireType::kBf16) return decode_bf16(static_cast<float*>(buffer), wire, count);
  if (count > 0) std::memcpy(buffer, wire, count * format.buffer_bytes());
}

bool encode(const WireFormat& format, const void* buffer, std::byte* wire, std::size_t count) {
  if (format.wire == WireType::kF16) return encode_f16(static_cast<const float*>(buffer), wire, count);
  if (format.wire == WireType::kBf16) return encode_bf16(static_cast<const float*>(buffer), wire, count);
  if (count > 0) std::memcpy(wire, buffer, count * format.buffer_bytes());
  return true;
}

// With `copy` (not null) each sum is stored there too, after both of its inputs were read: copy
// may be one of them.
template <class T>
void sum_two_scaled(T* buffer, T* copy, const std::byte* first, const std::byte* second, std::size_t count,
                    double factor) {
  const auto f = static_cast<T>(factor);
  auto sum = [&](std::size_t i) { return load<T>(first + i * sizeof(T)) + load<T>(second + i * sizeof(T)); };
  if (copy != nullptr && factor == 1.0) {
    for (std::size_t i = 0; i < count; ++i) buffer[i] = copy[i] = sum(i);
  } else if (copy != nullptr) {
    for (std::size_t i = 0; i < count; ++i) buffer[i] = copy[i] = sum(i) * f;
  } else if (factor == 1.0) {
    for (std::size_t i = 0; i < count; ++i) buffer[i] = sum(i);
  } else {
    for (std::size_t i = 0; i < count; ++i) buffer[i] = sum(i) * f;
  }
}

void sum_scaled(DType dtype, void* buffer, const std::byte* const* inputs, int num_inputs, std::size_t count,
                double factor) {
  sum_scaled_and_copy(dtype, buffer, nullptr, inputs, num_inputs, count, factor);
}

void sum_scaled_and_copy(DType dtype, void* buffer, void* copy, const std::byte* const* inputs, int num_inputs,
                         std::size_t count, double factor) {
  if (num_inputs == 2 && dtype == DType::f32) {
    return sum_two_scaled(static_cast<float*>(buffer), static_cast<float*>(copy), inputs[0], inputs[1], count, factor);
  }
  if (num_inputs == 2 && dtype == DType::f64) {
    return sum_two_scaled(static_cast<double*>(buffer), static_cast<double*>(copy), inputs[0], inputs[1], count, factor);
  }
  const WireFormat format{dtype, WireType::kNative};
  if (num_inputs > 0) decode(format, buffer, inputs[0], count);
  for (int k = 1; k < num_inputs; ++k) accumulate(format, buffer, inputs[k], count);
  if (factor != 1.0) scale(dtype, buffer, count, factor);
  if (copy != nullptr && count > 0) std::memcpy(copy, buffer, count * dtype_size(dtype));
}

void scale(DType dtype, void* buffer, std::size_t count, double factor) {
  switch (dtype) {
    case DType::f32: return scale_typed(static_cast<float*>(buffer), count, factor);
    case DType::f64: return scale_typed(static_cast<double*>(buffer), count, factor);
    case DType::i32: return scale_typed(static_cast<std::int32_t*>(buffer), count, factor);
    case DType::i64: return scale_typed(static_cast<std::int64_t*>(buffer), count, factor);
    case DType::f16: return scale_storage(static_cast<Half*>(buffer), count, factor);
    case DType::bf16: return scale_storage(static_cast<BFloat16*>(buffer), count, factor);
    default: throw InternalError("scale: unsupported dtype");
  }
}

// A value is inf or NaN when its exponent bits are all ones. The largest masked exponent of the
// buffer decides: a max reduction vectorises, where GCC 12 left an or-of-compares loop scalar
// (47k floats: 17-25 us scalar, 1.6-1.9 us vectorised).
template <class Bits, class Element>
bool any_exponent_all_ones(const Element* p, std::size_t count, Bits mask) {
  static_assert(sizeof(Bits) == sizeof(Element));
  Bits largest = 0;
  for (std::size_t i = 0; i < count; ++i) {
    Bits bits;
    std::memcpy(&bits, p + i, sizeof bits);
    const Bits exponent = bits & mask;
    largest = largest > exponent ? largest : exponent;
  }
  return largest == mask;
}

bool has_non_finite(DType dtype, const void* buffer, std::size_t count) {
  switch (dtype) {
    case DType::f32: return any_exponent_all_ones<std::uint32_t>(static_cast<const float*>(buffer), count, 0x7f800000u);
    case DType::f64: return any_exponent_all_ones<std::uint64_t>(static_cast<const double*>(buffer), count, 0x7ff0000000000000ull);
    case DType::f16: return any_exponent_all_ones<std::uint16_t>(static_cast<const Half*>(buffer), count, std::uint16_t{0x7c00u});
    case DType::bf16: return any_exponent_all_ones<std::uint16_t>(static_cast<const BFloat16*>(buffer), count, std::uint16_t{0x7f80u});
    default:
      return false;
  }
}

}  // namespace aiacc::ring::detail
