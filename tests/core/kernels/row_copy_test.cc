// copy_row: every dim from 1 to 130 (the fixed-size cases and the general one) copies exactly
// its row, from and to unaligned addresses, and not one float more.
#include "core/kernels/row_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace aiacc::kernels {
namespace {

TEST(RowCopy, CopiesExactlyOneRowOfAnyDim) {
  for (std::size_t dim = 1; dim <= 130; ++dim) {
    std::vector<float> src(dim + 2), dst(dim + 3, -1.0f);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
    // One byte in, so neither side is float-aligned.
    std::vector<unsigned char> raw_src(src.size() * 4 + 1), raw_dst(dst.size() * 4 + 1);
    std::memcpy(raw_src.data() + 1, src.data(), src.size() * 4);
    std::memcpy(raw_dst.data() + 1, dst.data(), dst.size() * 4);
    copy_row(raw_dst.data() + 1 + 4, raw_src.data() + 1 + 4, dim);  // row starts at float 1
    std::memcpy(dst.data(), raw_dst.data() + 1, dst.size() * 4);
    EXPECT_EQ(dst[0], -1.0f) << dim;
    for (std::size_t i = 0; i < dim; ++i) ASSERT_EQ(dst[1 + i], src[1 + i]) << "dim " << dim << " float " << i;
    EXPECT_EQ(dst[dim + 1], -1.0f) << "dim " << dim << ": wrote past the row";
  }
}

}  // namespace
}  // namespace aiacc::kernels
