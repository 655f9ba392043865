// One embedding row of `dim` floats, copied. Request paths copy rows one at a time by the
// hundred thousand (a client gathering a push's gradient rows by shard, scattering a pull's
// reply, a shard copying rows out of its arena), where a memcpy call per 32-byte row costs more
// than the copy itself: the common dims get a fixed-size copy, a few vector moves inline.
#pragma once

#include <cstddef>
#include <cstring>

namespace aiacc::kernels {

// Either side may be unaligned (a row inside a received message frame).
inline void copy_row(void* __restrict dst, const void* __restrict src, std::size_t dim) {
  switch (dim) {
    case 4: std::memcpy(dst, src, 4 * sizeof(float)); return;
    case 8: std::memcpy(dst, src, 8 * sizeof(float)); return;
    case 16: std::memcpy(dst, src, 16 * sizeof(float)); return;
    case 32: std::memcpy(dst, src, 32 * sizeof(float)); return;
    case 64: std::memcpy(dst, src, 64 * sizeof(float)); return;
    case 128: std::memcpy(dst, src, 128 * sizeof(float)); return;
    default: std::memcpy(dst, src, dim * sizeof(float)); return;
  }
}

}  // namespace aiacc::kernels
