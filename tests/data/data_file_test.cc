// DataFile against zlib's own writer and plain bytes: plain and gzip'd content read back equal,
// in reads of any size; several gzip members read as one stream (what gzip -d and cat give);
// zero padding after the data is ignored (gzip -d does); other bytes after it, a stream cut
// short and corrupt data are errors naming the file. zlib's gzread returned the first member
// and dropped a plain file appended to it without a word.
#include "data/detail/data_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/util/random.h"
#include "tests/data/data_files.h"

namespace aiacc::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

std::vector<std::uint8_t> some_bytes(std::size_t count, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::uint8_t> bytes(count);
  // Compressible (letters and newlines), so the gzip data spans several inflate calls.
  for (auto& b : bytes) b = static_cast<std::uint8_t>(rng.below(8) == 0 ? '\n' : 'a' + rng.below(6));
  return bytes;
}

std::vector<std::uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Everything `path` holds, read `step` bytes at a time.
std::vector<std::uint8_t> read_all(const std::string& path, std::size_t step) {
  detail::DataFile file(path);
  std::vector<std::uint8_t> out;
  std::vector<char> buffer(step);
  for (std::size_t got; (got = file.read(buffer.data(), step)) > 0;) out.insert(out.end(), buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(got));
  EXPECT_EQ(file.read(buffer.data(), step), 0u) << "a read after the end";
  return out;
}

std::string error_of(const std::string& path) {
  try {
    read_all(path, 1 << 16);
  } catch (const DataError& e) {
    return e.what();
  }
  return "<no DataError>";
}

TEST(DataFile, PlainAndGzipContentReadsBackInReadsOfAnySize) {
  TempDir dir;
  const auto content = some_bytes(3 << 20, 1);  // 3 MiB: several input buffers
  testing::write_plain(dir.file("plain"), content);
  testing::write_gzip(dir.file("packed.gz"), content);
  for (std::size_t step : {std::size_t{1} << 20, std::size_t{4096}, std::size_t{7}}) {
    if (step == 7) {  // byte-sized reads of a smaller file only: 3 MiB would take a while
      const auto small = some_bytes(20000, 2);
      testing::write_gzip(dir.file("small.gz"), small);
      EXPECT_EQ(read_all(dir.file("small.gz"), step), small);
      continue;
    }
    EXPECT_EQ(read_all(dir.file("plain"), step), content) << step;
    EXPECT_EQ(read_all(dir.file("packed.gz"), step), content) << step;
  }
  EXPECT_FALSE(detail::DataFile(dir.file("plain")).compressed());
  EXPECT_TRUE(detail::DataFile(dir.file("packed.gz")).compressed());
  testing::write_plain(dir.file("empty"), {});
  EXPECT_TRUE(read_all(dir.file("empty"), 100).empty());
  testing::write_plain(dir.file("one"), {0x1f});
  EXPECT_EQ(read_all(dir.file("one"), 100), (std::vector<std::uint8_t>{0x1f}));
}

TEST(DataFile, ConcatenatedMembersAndZeroPaddingReadAsOneStream) {
  TempDir dir;
  const auto first = some_bytes(100000, 3), second = some_bytes(5000, 4);
  testing::write_gzip(dir.file("a.gz"), first);
  testing::write_gzip(dir.file("b.gz"), second);
  auto both = file_bytes(dir.file("a.gz"));
  const auto b = file_bytes(dir.file("b.gz"));
  both.insert(both.end(), b.begin(), b.end());
  testing::write_plain(dir.file("both.gz"), both);
  auto expected = first;
  expected.insert(expected.end(), second.begin(), second.end());
  EXPECT_EQ(read_all(dir.file("both.gz"), 65536), expected);
  both.resize(both.size() + 1000, 0);
  testing::write_plain(dir.file("padded.gz"), both);
  EXPECT_EQ(read_all(dir.file("padded.gz"), 65536), expected);
}

TEST(DataFile, TrailingCutAndCorruptGzipDataAreErrorsNamingTheFile) {
  TempDir dir;
  const auto content = some_bytes(100000, 5);
  testing::write_gzip(dir.file("a.gz"), content);
  const auto packed = file_bytes(dir.file("a.gz"));

  auto appended = packed;  // a plain file appended to a compressed one
  appended.insert(appended.end(), content.begin(), content.begin() + 1234);
  testing::write_plain(dir.file("appended.gz"), appended);
  EXPECT_THAT(error_of(dir.file("appended.gz")),
              HasSubstr(dir.file("appended.gz") + ": 1234 bytes after the gzip data are not another gzip stream"));
  auto zeros_then_text = packed;
  zeros_then_text.insert(zeros_then_text.end(), {0, 0, 'x'});
  testing::write_plain(dir.file("zx.gz"), zeros_then_text);
  EXPECT_THAT(error_of(dir.file("zx.gz")), HasSubstr(": 3 bytes after the gzip data"));

  auto cut = packed;
  cut.resize(cut.size() / 2);
  testing::write_plain(dir.file("cut.gz"), cut);
  EXPECT_THAT(error_of(dir.file("cut.gz")),
              HasSubstr(dir.file("cut.gz") + ": corrupt or truncated gzip data: the file ends inside a gzip stream"));
  auto corrupt = packed;
  for (std::size_t i = 20; i < 60; ++i) corrupt[i] ^= 0x5a;
  testing::write_plain(dir.file("corrupt.gz"), corrupt);
  EXPECT_THAT(error_of(dir.file("corrupt.gz")), HasSubstr(dir.file("corrupt.gz") + ": corrupt or truncated gzip data"));
  EXPECT_THAT(error_of(dir.file("missing")), HasSubstr(dir.file("missing") + ": no such file"));
  EXPECT_THAT(error_of(dir.path()), HasSubstr(dir.path() + ": not a regular file"));
}

}  // namespace
}  // namespace aiacc::data
