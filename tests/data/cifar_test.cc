// cifar: generated CIFAR-10 record files (the real data is not installable here): layout,
// per-channel normalisation, file order, limit, split, and DataErrors naming file and record.
#include "data/cifar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/data/data_files.h"

namespace aiacc::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_gzip;
using testing::write_plain;

// Record r of file f: label (f*7 + r) % 10, pixel p of channel c = (r + 3c + p) % 256.
std::vector<std::uint8_t> records(int file, int count) {
  std::vector<std::uint8_t> out;
  for (int r = 0; r < count; ++r) {
    out.push_back(static_cast<std::uint8_t>((file * 7 + r) % 10));
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < 1024; ++p) out.push_back(static_cast<std::uint8_t>((r + 3 * c + p) % 256));
    }
  }
  return out;
}

Cifar::Options options_for(const TempDir& dir) {
  Cifar::Options options;
  options.directory = dir.path();
  options.train_files = {"a.bin", "b.bin.gz"};
  options.test_files = {"t.bin"};
  options.normalize_mean = {0.1, 0.2, 0.3};
  options.normalize_std = {0.5, 0.25, 2.0};
  return options;
}

TEST(Cifar, ReadsRecordsAcrossFilesWithPerChannelNormalisation) {
  TempDir dir;
  write_plain(dir.file("a.bin"), records(0, 3));
  write_gzip(dir.file("b.bin.gz"), records(1, 2));
  Cifar train(options_for(dir), {"train", 0});
  ASSERT_EQ(train.size(), 5);
  EXPECT_EQ(train.spec().example_shape, (Shape{3, 32, 32}));
  EXPECT_EQ(train.spec().num_classes, 10);

  Batch batch;
  std::vector<std::int64_t> order = {4, 1};  // file b record 1, file a record 1
  train.read(order, batch);
  EXPECT_EQ(batch.inputs.shape(), (Shape{2, 3, 32, 32}));
  EXPECT_EQ(batch.labels.to_vector<std::int64_t>(), (std::vector<std::int64_t>{8, 1}));
  const double mean[3] = {0.1, 0.2, 0.3}, std[3] = {0.5, 0.25, 2.0};
  const float* values = batch.inputs.data<float>();
  for (int i = 0; i < 2; ++i) {
    const int r = 1;
    for (int c = 0; c < 3; ++c) {
      for (int p : {0, 1, 500, 1023}) {
        const double pixel = (r + 3 * c + p) % 256;
        EXPECT_NEAR(values[(i * 3 + c) * 1024 + p], (pixel / 255.0 - mean[c]) / std[c], 1e-5);
      }
    }
  }
}

TEST(Cifar, LimitAndTestSplit) {
  TempDir dir;
  write_plain(dir.file("a.bin"), records(0, 3));
  write_gzip(dir.file("b.bin.gz"), records(1, 2));
  write_plain(dir.file("t.bin"), records(2, 4));
  auto options = options_for(dir);
  options.limit = 4;
  EXPECT_EQ(Cifar(options, {"train", 0}).size(), 4);
  options.limit = 2;  // the second file is never opened
  std::filesystem::remove(dir.file("b.bin.gz"));
  EXPECT_EQ(Cifar(options, {"train", 0}).size(), 2);
  EXPECT_EQ(Cifar(options_for(dir), {"test", 0}).size(), 4);
}

std::string error_for(const std::vector<std::uint8_t>& first) {
  TempDir dir;
  write_plain(dir.file("a.bin"), first);
  write_gzip(dir.file("b.bin.gz"), records(1, 1));
  try {
    Cifar dataset(options_for(dir), {"train", 0});
  } catch (const DataError& e) {
    return e.what();
  }
  return "<no DataError>";
}

TEST(CifarErrors, TruncatedEmptyBadLabelMissing) {
  auto cut = records(0, 3);
  cut.resize(cut.size() - 100);
  EXPECT_THAT(error_for(cut), HasSubstr("a.bin: 9119 bytes is not a whole number of 3073-byte CIFAR-10 "
                                        "records (record 2 is incomplete): truncated, or not a CIFAR-10"));
  auto bad = records(0, 3);
  bad[3073] = 11;
  EXPECT_THAT(error_for(bad), HasSubstr("a.bin: record 1: label 11 is not below num_classes 10"));

  // Missing and empty files are configuration errors naming the key (no restart mends them).
  TempDir dir;
  const auto config_error = [&] {
    try {
      Cifar dataset(options_for(dir), {"train", 0});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<no ConfigError>");
  };
  EXPECT_EQ(config_error(), "data.train.cifar.train_files[0]: " + dir.file("a.bin") + ": no such file");
  write_plain(dir.file("a.bin"), {});
  EXPECT_EQ(config_error(), "data.train.cifar.train_files[0]: " + dir.file("a.bin") + ": empty file");
  write_plain(dir.file("a.bin"), records(0, 1));
  EXPECT_EQ(config_error(), "data.train.cifar.train_files[1]: " + dir.file("b.bin.gz") + ": no such file");
}

// What a launcher checks before it starts a job: every file, or with a limit only the first
// (the reader may not open the others).
TEST(Cifar, InputFilesAreTheFilesSurelyRead) {
  TempDir dir;
  auto options = options_for(dir);
  auto files = Cifar::input_files(options, {"train", 0});
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[1].key, "data.train.cifar.train_files[1]");
  EXPECT_EQ(files[1].path, dir.file("b.bin.gz"));
  options.limit = 2;
  EXPECT_EQ(Cifar::input_files(options, {"train", 0}).size(), 1u);
  EXPECT_EQ(Cifar::input_files(options, {"test", 0}).front().key, "data.test.cifar.test_files[0]");
}

}  // namespace
}  // namespace aiacc::data
