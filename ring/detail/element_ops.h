// Element-wise operations the collectives apply to raw buffers: reduce a received (wire-typed)
// chunk into the local buffer, convert between the buffer's type and the wire type, scale.
// Internal to ring/. Received bytes may be unaligned (see net::Message), so every read of
// `wire` memory is an unaligned load.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "ring/reduce_op.h"

namespace aiacc::ring::detail {

// How a buffer of `dtype` travels as `wire`: the element size on the wire and whether the
// wire form differs from the buffer (then sends go through a staging buffer).
struct WireFormat {
  DType buffer = DType::f32;
  WireType wire = WireType::kNative;

  std::size_t buffer_bytes() const { return dtype_size(buffer); }
  std::size_t wire_bytes() const;
  bool converts() const { return wire != WireType::kNative; }
};

// Throws ConfigError unless `dtype` can be reduced (f32, f64, f16, bf16, i32, i64) and `wire`
// applies to it (fp16/bf16 wire only for f32 buffers). `what` names the caller.
WireFormat make_wire_format(DType dtype, WireType wire, const char* what);

// buffer[i] += wire[i] for i < count (accumulating in the buffer's type; for f16/bf16 buffers
// the sum is formed in float and rounded once).
void accumulate(const WireFormat& format, void* buffer, const std::byte* wire, std::size_t count);
// buffer[i] = wire[i].
void decode(const WireFormat& format, void* buffer, const std::byte* wire, std::size_t count);
// wire[i] = buffer[i]; returns false if a finite value became non-finite (overflow).
bool encode(const WireFormat& format, const void* buffer, std::byte* wire, std::size_t count);
// buffer[i] = inputs[0][i] + inputs[1][i] + ... (native `dtype`, in input order), then scaled
// by `factor` unless it is 1: the same result as decode, accumulate and scale one after the
// other, in one pass over two f32/f64 inputs. `buffer` must not overlap the inputs.
void sum_scaled(DType dtype, void* buffer, const std::byte* const* inputs, int num_inputs, std::size_t count,
                double factor);
// sum_scaled, with each result also stored in `copy` (in the same pass for two f32/f64 inputs:
// the sums need not be read back to be copied). `copy` is exactly one of the inputs, or overlaps
// neither them nor `buffer`: a partly overlapping copy would be written before it is read.
void sum_scaled_and_copy(DType dtype, void* buffer, void* copy, const std::byte* const* inputs, int num_inputs,
                         std::size_t count, double factor);
// buffer[i] *= factor (integers: division by n, truncating, when factor = 1/n).
void scale(DType dtype, void* buffer, std::size_t count, double factor);
// True if any element is inf or NaN (always false for integer types).
bool has_non_finite(DType dtype, const void* buffer, std::size_t count);

}  // namespace aiacc::ring::detail
