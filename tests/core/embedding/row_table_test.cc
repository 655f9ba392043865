// RowTable (internal to core/embedding): rows stay where they were created while the table grows,
// and a row of whole cache lines starts on a cache line (blocks are 64-byte aligned), so a
// 64-byte row (dim 8 with Adagrad state) is one line to fetch, not two.
#include "core/embedding/detail/row_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace aiacc::embedding::detail {
namespace {

TEST(RowTable, RowsOfWholeLinesStartOnALineAndNeverMove) {
  constexpr std::int64_t kRowFloats = 16;  // 64 bytes
  RowTable table(kRowFloats, /*rows_per_block=*/1024, /*max_load=*/0.7);
  std::vector<float*> rows;
  for (std::int64_t id = 0; id < 5000; ++id) {
    bool created = false;
    float* row = table.find_or_insert(id * 7919, row_hash(id * 7919), created);
    ASSERT_TRUE(created);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(row) % 64, 0u) << "row of id " << id * 7919;
    row[0] = static_cast<float>(id);
    rows.push_back(row);
  }
  EXPECT_EQ(table.size(), 5000);
  for (std::int64_t id = 0; id < 5000; ++id) {
    float* row = table.find(id * 7919, row_hash(id * 7919));
    ASSERT_EQ(row, rows[static_cast<std::size_t>(id)]) << "row of id " << id * 7919 << " moved";
    EXPECT_EQ(row[0], static_cast<float>(id));
  }
  EXPECT_EQ(table.find(-1, row_hash(-1)), nullptr);
}

}  // namespace
}  // namespace aiacc::embedding::detail
