// safetensors: round trip of every dtype (0-dim and empty tensors included), the exact bytes of
// a small file against a hand-built expectation, and one DataError per kind of malformed file.
#include "core/io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "tests/core/io/temp_dir.h"

namespace aiacc::io {
namespace {

using aiacc::testing::read_bytes;
using aiacc::testing::TempDir;
using aiacc::testing::write_bytes;
using ::testing::HasSubstr;

std::string le64(std::uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

NamedTensors every_dtype() {
  std::vector<Half> halves{to_half(1.5f), to_half(-2.25f), to_half(65504.0f), to_half(1e-7f)};
  std::vector<BFloat16> bhalves{to_bf16(3.0f), to_bf16(-0.5f), to_bf16(1e30f)};
  return {
      {"layer.weight", Tensor::from_vector<float>({1, -2, 3.5f, 1e-30f, 7, 8}, Shape{2, 3})},
      {"layer.bias64", Tensor::from_vector<double>({0.1, -1e300, 42}, Shape{3})},
      {"half", Tensor::from_vector<Half>(halves, Shape{2, 2})},
      {"bhalf", Tensor::from_vector<BFloat16>(bhalves, Shape{3, 1})},
      {"ids", Tensor::from_vector<std::int64_t>({-1, 1LL << 40, 0, 9}, Shape{2, 2})},
      {"counts", Tensor::from_vector<std::int32_t>({-7, 2147483647}, Shape{2})},
      {"bytes", Tensor::from_vector<std::uint8_t>({0, 255, 17}, Shape{1, 3})},
      {"step", Tensor::from_vector<std::int64_t>({123456789}, Shape{})},  // 0-dim
      {"loss_scale", Tensor::from_vector<float>({65536}, Shape{})},       // 0-dim f32
      {"empty", Tensor::zeros(Shape{0, 4})},                              // no bytes
      {"bn.num_batches_tracked", Tensor::from_vector<std::int64_t>({5}, Shape{})},
  };
}

TEST(SafetensorsTest, RoundTripEveryDtypeBitwise) {
  TempDir dir;
  auto path = (dir / "all.safetensors").string();
  NamedTensors tensors = every_dtype();
  Metadata metadata{{"format", "pt"}, {"config", "{\"lr\": 0.1}\nunicode: \xc3\xa9"}};
  SafetensorsWriteResult written = write_safetensors(path, tensors, metadata);

  std::string bytes = read_bytes(path);
  EXPECT_EQ(written.num_bytes, bytes.size());
  EXPECT_EQ(written.crc32, ::crc32(0, reinterpret_cast<const Bytef*>(bytes.data()),
                                   static_cast<uInt>(bytes.size())));

  SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.metadata, metadata);
  EXPECT_EQ(file.num_bytes, written.num_bytes);
  EXPECT_EQ(file.crc32, written.crc32);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, expected] = tensors[i];
    const auto& [got_name, got] = file.tensors[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(got_name, name) << "order is preserved";
    EXPECT_EQ(got.dtype(), expected.dtype());
    EXPECT_EQ(got.shape(), expected.shape());
    ASSERT_EQ(got.num_bytes(), expected.num_bytes());
    EXPECT_EQ(std::memcmp(got.raw_data(), expected.raw_data(), got.num_bytes()), 0);
  }
  ASSERT_NE(file.find("step"), nullptr);
  EXPECT_EQ(file.find("step")->rank(), 0);
  EXPECT_EQ(file.find("step")->data<std::int64_t>()[0], 123456789);
  EXPECT_EQ(file.find("nope"), nullptr);
}

TEST(SafetensorsTest, ViewsAreWrittenFromTheirOwnBytes) {
  TempDir dir;
  auto path = (dir / "views.safetensors").string();
  Tensor table = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, Shape{4, 2});
  write_safetensors(path, {{"tail", table.rows(2, 4)}}, {});
  SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.tensors[0].second.to_vector<float>(), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_TRUE(file.metadata.empty());
}

TEST(SafetensorsTest, HeaderBytesMatchTheSpecExactly) {
  TempDir dir;
  auto path = (dir / "small.safetensors").string();
  write_safetensors(path,
                    {{"a", Tensor::from_vector<float>({1.0f, 2.0f}, Shape{2})},
                     {"s", Tensor::from_vector<std::int64_t>({7}, Shape{})}},
                    {{"format", "pt"}});
  // 138 bytes of compact JSON + 6 spaces = 144 = 0x90.
  const std::string json = R"({"__metadata__":{"format":"pt"},)"
                           R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("s":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})";
  ASSERT_EQ(json.size(), 138u);
  std::string expected("\x90\0\0\0\0\0\0\0", 8);
  expected += json + "      ";
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f little-endian
  expected += std::string("\x07\0\0\0\0\0\0\0", 8);                // int64 7 little-endian
  EXPECT_EQ(read_bytes(path), expected);
}

TEST(SafetensorsTest, WriterRejectsBadNames) {
  TempDir dir;
  auto path = (dir / "bad.safetensors").string();
  Tensor t = Tensor::zeros(Shape{1});
  EXPECT_THROW(write_safetensors(path, {{"x", t}, {"x", t}}, {}), InternalError);
  EXPECT_THROW(write_safetensors(path, {{"__metadata__", t}}, {}), InternalError);
  EXPECT_THROW(write_safetensors(path, {{"", t}}, {}), InternalError);
  EXPECT_THROW(write_safetensors(path, {{"u", Tensor()}}, {}), InternalError);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(SafetensorsTest, MissingFileIsAnIoError) {
  TempDir dir;
  EXPECT_THROW(read_safetensors((dir / "absent.safetensors").string()), IoError);
}

// A file from a header text (not padded: the format allows any length) and a data buffer.
std::string make_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

struct BadCase {
  const char* label;
  std::string bytes;
  const char* expected;  // part of the DataError message
};

std::vector<BadCase> bad_cases() {
  const std::string f32x2 = std::string(8, '\x01');
  auto one = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"t":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" +
           offsets + "}}";
  };
  return {
      {"too_short", std::string("\x05\0\0", 3), "too short"},
      {"header_past_end", le64(1000) + "{}", "runs past the end"},
      {"absurd_header_size", le64(1ULL << 62) + std::string(64, ' '), "exceeds the limit"},
      {"header_size_wraps", le64(~0ULL - 4) + std::string(64, ' '), "exceeds the limit"},
      {"not_an_object", make_file("[1, 2]  ", ""), "does not start with a JSON object"},
      {"invalid_json", make_file(R"({"t": {"dtype": )", ""), "not valid JSON"},
      {"invalid_utf8", make_file("{\"\xff\xfe\":1}  ", ""), "not valid JSON"},
      {"unknown_dtype", make_file(one("I8", "[2]", "[0,2]"), "ab"), "unsupported dtype \"I8\""},
      {"dtype_not_string",
       make_file(R"({"t":{"dtype":32,"shape":[2],"data_offsets":[0,8]}})", f32x2),
       "'dtype' is not a string"},
      {"missing_offsets", make_file(R"({"t":{"dtype":"F32","shape":[2]}})", f32x2),
       "'data_offsets' is missing"},
      {"negative_dim", make_file(one("F32", "[-2]", "[0,8]"), f32x2), "non-negative"},
      {"float_dim", make_file(one("F32", "[2.0]", "[0,8]"), f32x2), "non-negative"},
      {"rank_too_high", make_file(one("F32", "[1,1,1,1,1,1,1,1,2]", "[0,8]"), f32x2),
       "array longer than 8"},
      {"offsets_past_buffer", make_file(one("F32", "[2]", "[0,16]"), f32x2), "run past the data"},
      {"offsets_reversed", make_file(one("F32", "[2]", "[8,0]"), f32x2), "end before they begin"},
      {"offsets_three", make_file(one("F32", "[2]", "[0,4,8]"), f32x2), "pair of non-negative"},
      {"size_mismatch", make_file(one("F32", "[3]", "[0,8]"), f32x2), "needs 12"},
      {"shape_product_wraps", make_file(one("F32", "[4294967296,4294967296]", "[0,0]"), ""),
       "more than 2^64"},
      {"overlap",
       make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 f32x2),
       "overlaps tensor"},
      {"hole",
       make_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                 R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                 "abcdef"),
       "belong to no tensor"},
      {"trailing_garbage", make_file(one("F32", "[2]", "[0,8]"), f32x2 + "junk"),
       "4 trailing bytes"},
      {"duplicate_name",
       make_file(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                 R"("t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                 "ab"),
       "key 't' twice"},
      {"duplicate_field",
       make_file(R"({"t":{"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,1]}})", "a"),
       "key 'dtype' twice"},
      {"deep_nesting",
       make_file("{\"a\":" + std::string(5000, '[') + std::string(5000, ']') + "}", ""),
       "nested deeper"},
      {"entry_not_object", make_file(R"({"t":[1]})", ""), "not a JSON object"},
      {"metadata_not_strings", make_file(R"({"__metadata__":{"k":1}})", ""), "is not a string"},
  };
}

TEST(SafetensorsTest, MalformedFilesAreDataErrorsNamingFileAndProblem) {
  TempDir dir;
  for (const BadCase& bad : bad_cases()) {
    SCOPED_TRACE(bad.label);
    auto path = (dir / (std::string(bad.label) + ".safetensors")).string();
    write_bytes(path, bad.bytes);
    try {
      read_safetensors(path);
      ADD_FAILURE() << "expected DataError";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr(path));
      EXPECT_THAT(e.what(), HasSubstr(bad.expected));
      if (std::getenv("AIACC_SHOW_MESSAGES")) std::printf("%s\n", e.what());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "unexpected exception type: " << e.what();
    }
  }
}

// Every truncation of a valid file is rejected (a crash half-way through a copy, say).
TEST(SafetensorsTest, EveryTruncationIsADataError) {
  TempDir dir;
  auto path = (dir / "ok.safetensors").string();
  write_safetensors(path, every_dtype(), {{"format", "pt"}});
  const std::string bytes = read_bytes(path);
  auto cut = (dir / "cut.safetensors").string();
  // Every cut in the prefix and header (where the parser's branches are), then a stride through
  // the data: one file per size is slow on some filesystems.
  for (std::size_t size = 0; size < bytes.size(); size += size < 200 ? 1 : 13) {
    write_bytes(cut, bytes.substr(0, size));
    EXPECT_THROW(read_safetensors(cut), DataError) << "truncated to " << size << " bytes";
  }
}

}  // namespace
}  // namespace aiacc::io
