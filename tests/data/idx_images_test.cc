// idx_images: the real Fashion-MNIST when installed (labels, counts, normalisation), exact
// read-back of generated plain and gzip'd IDX files, and a DataError naming the file for every
// kind of bad file.
#include "data/idx_images.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include "core/error.h"
#include "data/detail/file_bytes.h"
#include "tests/data/data_files.h"

namespace aiacc::data {
namespace {

using ::testing::HasSubstr;
using testing::idx_bytes;
using testing::TempDir;
using testing::write_gzip;
using testing::write_plain;

constexpr const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

bool have_fashion_mnist() {
  return std::filesystem::exists(std::string(kFashionDir) + "/train-images-idx3-ubyte.gz") &&
         std::filesystem::exists(std::string(kFashionDir) + "/t10k-labels-idx1-ubyte.gz");
}

TEST(IdxImagesFashionMnist, FirstLabelsCountsAndNormalisation) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST not installed: apt-get install dataset-fashion-mnist";
  IdxImages train({}, {"train", 0});
  EXPECT_EQ(train.size(), 60000);
  InputSpec spec = train.spec();
  EXPECT_EQ(spec.example_shape, (Shape{1, 28, 28}));
  EXPECT_EQ(spec.num_classes, 10);

  std::vector<std::int64_t> first(10);
  std::iota(first.begin(), first.end(), 0);
  Batch batch;
  train.read(first, batch);
  EXPECT_EQ(batch.labels.to_vector<std::int64_t>(), (std::vector<std::int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  EXPECT_EQ(batch.inputs.shape(), (Shape{10, 1, 28, 28}));

  // Published statistics of pixel/255 are mean 0.2860, std 0.3530: normalised data must have
  // mean ~0 and std ~1 over the whole train set. Also count labels per class (6000 each).
  double sum = 0, sum_squares = 0;
  std::vector<std::int64_t> per_class(10, 0);
  std::vector<std::int64_t> indices(1000);
  for (std::int64_t begin = 0; begin < train.size(); begin += 1000) {
    std::iota(indices.begin(), indices.end(), begin);
    train.read(indices, batch);
    for (float v : batch.inputs.span<float>()) {
      sum += v;
      sum_squares += double{v} * v;
    }
    for (auto label : batch.labels.span<std::int64_t>()) ++per_class[static_cast<std::size_t>(label)];
  }
  const double count = 60000.0 * 784.0;
  const double mean = sum / count;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sum_squares / count - mean * mean), 1.0, 0.01);
  EXPECT_EQ(per_class, std::vector<std::int64_t>(10, 6000));

  IdxImages test({}, {"test", 0});
  EXPECT_EQ(test.size(), 10000);
}

TEST(IdxImagesFashionMnist, LimitKeepsTheFirstExamples) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST not installed: apt-get install dataset-fashion-mnist";
  IdxImages::Options options;
  options.limit = 3;
  IdxImages train(options, {"train", 0});
  EXPECT_EQ(train.size(), 3);
  Batch batch;
  std::vector<std::int64_t> all = {0, 1, 2};
  train.read(all, batch);
  EXPECT_EQ(batch.labels.to_vector<std::int64_t>(), (std::vector<std::int64_t>{9, 0, 0}));
}

// Four 2x3 images whose pixels are 0..23 scaled to cover 0..253, labels 3 1 4 1.
struct TinyIdx {
  std::vector<std::uint8_t> pixels, labels{3, 1, 4, 1};
  TinyIdx() {
    for (int i = 0; i < 24; ++i) pixels.push_back(static_cast<std::uint8_t>(i * 11));
  }
  std::vector<std::uint8_t> images_file() const { return idx_bytes({4, 2, 3}, pixels); }
  std::vector<std::uint8_t> labels_file() const { return idx_bytes({4}, labels); }
};

IdxImages::Options tiny_options(const TempDir& dir) {
  IdxImages::Options options;
  options.directory = dir.path();
  options.train_images = "images";
  options.train_labels = "labels";
  options.test_images = "test_images";
  options.test_labels = "test_labels";
  options.normalize_mean = 0.5;
  options.normalize_std = 0.25;
  return options;
}

void expect_reads_back(IdxImages& dataset, const TinyIdx& tiny, double mean, double std) {
  ASSERT_EQ(dataset.size(), 4);
  EXPECT_EQ(dataset.spec().example_shape, (Shape{1, 2, 3}));
  Batch batch;
  std::vector<std::int64_t> order = {2, 0, 3, 1};
  dataset.read(order, batch);
  EXPECT_EQ(batch.labels.to_vector<std::int64_t>(), (std::vector<std::int64_t>{4, 3, 1, 1}));
  const float* values = batch.inputs.data<float>();
  for (std::size_t i = 0; i < order.size(); ++i) {
    for (int p = 0; p < 6; ++p) {
      const double pixel = tiny.pixels[static_cast<std::size_t>(order[i] * 6 + p)];
      EXPECT_NEAR(values[i * 6 + p], (pixel / 255.0 - mean) / std, 1e-5) << "example " << order[i];
    }
  }
}

TEST(IdxImages, ReadsGeneratedPlainAndGzipFilesExactly) {
  TempDir dir;
  TinyIdx tiny;
  write_plain(dir.file("images"), tiny.images_file());
  write_plain(dir.file("labels"), tiny.labels_file());
  IdxImages plain(tiny_options(dir), {"train", 0});
  expect_reads_back(plain, tiny, 0.5, 0.25);

  write_gzip(dir.file("images.gz"), tiny.images_file());
  write_gzip(dir.file("labels.gz"), tiny.labels_file());
  auto options = tiny_options(dir);
  options.train_images = "images.gz";
  options.train_labels = dir.file("labels.gz");  // absolute paths ignore the directory
  IdxImages gzipped(options, {"train", 0});
  expect_reads_back(gzipped, tiny, 0.5, 0.25);
}

TEST(IdxImages, SplitPicksTheFilePair) {
  TempDir dir;
  TinyIdx tiny;
  write_plain(dir.file("test_images"), idx_bytes({1, 2, 3}, std::vector<std::uint8_t>(6, 255)));
  write_plain(dir.file("test_labels"), idx_bytes({1}, {7}));
  IdxImages test(tiny_options(dir), {"test", 0});
  EXPECT_EQ(test.size(), 1);
  EXPECT_THROW(IdxImages(tiny_options(dir), {"valid", 0}), ConfigError);
}

// The DataError message for a train split whose images/labels files hold these bytes.
std::string error_for(const std::vector<std::uint8_t>& images, const std::vector<std::uint8_t>& labels,
                      bool gzip = false) {
  TempDir dir;
  (gzip ? write_gzip : write_plain)(dir.file("images"), images);
  (gzip ? write_gzip : write_plain)(dir.file("labels"), labels);
  try {
    IdxImages dataset(tiny_options(dir), {"train", 0});
  } catch (const DataError& e) {
    return e.what();
  }
  return "<no DataError>";
}

TEST(IdxImagesErrors, TruncatedDataNamesFileAndSizes) {
  TinyIdx tiny;
  auto images = tiny.images_file();
  images.resize(images.size() - 5);
  for (bool gzip : {false, true}) {
    std::string message = error_for(images, tiny.labels_file(), gzip);
    EXPECT_THAT(message, HasSubstr("images: truncated: header promises 4x2x3 = 24 bytes of data, file holds 19"));
  }
  EXPECT_THAT(error_for(idx_bytes({4, 2, 3}, {}), tiny.labels_file()), HasSubstr("file holds 0"));
  // A header cut short.
  auto header = tiny.images_file();
  header.resize(10);
  EXPECT_THAT(error_for(header, tiny.labels_file()), HasSubstr("images: truncated: the header needs 16 bytes"));
  // Extra bytes mean the header does not describe this file.
  auto longer = tiny.images_file();
  longer.push_back(0);
  EXPECT_THAT(error_for(longer, tiny.labels_file()), HasSubstr("images: 1 unexpected bytes after the data"));
}

TEST(IdxImagesErrors, CorruptGzipStreamNamesFile) {
  TempDir dir;
  TinyIdx tiny;
  write_gzip(dir.file("images"), tiny.images_file());
  auto bytes = detail::read_file_bytes(dir.file("images"));  // sanity: intact file reads
  EXPECT_EQ(bytes, tiny.images_file());
  // Cut the compressed stream itself.
  std::ifstream in(dir.file("images"), std::ios::binary);
  std::vector<std::uint8_t> compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  compressed.resize(compressed.size() / 2);
  write_plain(dir.file("images"), compressed);
  try {
    detail::read_file_bytes(dir.file("images"));
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir.file("images") + ": corrupt or truncated gzip data"));
  }
}

TEST(IdxImagesErrors, WrongMagicNamesBothNumbers) {
  TinyIdx tiny;
  // The labels file given as images: magic 0x00000801.
  EXPECT_THAT(error_for(tiny.labels_file(), tiny.labels_file()),
              HasSubstr("images: bad magic number 0x00000801, expected 0x00000803"));
  auto not_uint8 = tiny.labels_file();
  not_uint8[2] = 0x0d;  // float data
  EXPECT_THAT(error_for(tiny.images_file(), not_uint8),
              HasSubstr("labels: bad magic number 0x00000d01, expected 0x00000801"));
}

TEST(IdxImagesErrors, CountMismatchNamesBothFiles) {
  TinyIdx tiny;
  std::string message = error_for(tiny.images_file(), idx_bytes({3}, {1, 2, 3}));
  EXPECT_THAT(message, HasSubstr("images holds 4 images but"));
  EXPECT_THAT(message, HasSubstr("labels holds 3 labels"));
}

TEST(IdxImagesErrors, EmptyFile) {
  TinyIdx tiny;
  // An empty file on disk is a configuration error (no restart fills it); gzip'd emptiness is data.
  TempDir dir;
  write_plain(dir.file("images"), {});
  write_plain(dir.file("labels"), tiny.labels_file());
  try {
    IdxImages dataset(tiny_options(dir), {"train", 0});
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "data.train.idx_images.train_images: " + dir.file("images") + ": empty file");
  }
  EXPECT_THAT(error_for({}, tiny.labels_file(), true), HasSubstr("images: empty file"));
  EXPECT_THAT(error_for(tiny.images_file(), {}, true), HasSubstr("labels: empty file"));
}

TEST(IdxImagesErrors, LabelOutOfRange) {
  TinyIdx tiny;
  EXPECT_THAT(error_for(tiny.images_file(), idx_bytes({4}, {1, 2, 10, 3})),
              HasSubstr("labels: label 10 of example 2 is not below num_classes 10"));
}

TEST(IdxImagesErrors, MissingFileIsAConfigErrorWithKeyPathAndInstallHint) {
  TempDir dir;
  try {
    IdxImages dataset(tiny_options(dir), {"train", 0});
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("data.train.idx_images.train_images: " + dir.file("images") + ": no such file"));
    EXPECT_THAT(e.what(), HasSubstr("apt-get install dataset-fashion-mnist"));
  }
  std::filesystem::create_directory(dir.file("images"));
  EXPECT_THROW(IdxImages(tiny_options(dir), {"train", 0}), ConfigError);
  // The labels of the test split, named by their own key.
  write_plain(dir.file("test_images"), TinyIdx().images_file());
  try {
    IdxImages dataset(tiny_options(dir), {"test", 0});
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("data.test.idx_images.test_labels: " + dir.file("test_labels") + ": no such file"));
  }
}

TEST(IdxImages, IndexOutOfRangeIsAnInternalError) {
  TempDir dir;
  TinyIdx tiny;
  write_plain(dir.file("images"), tiny.images_file());
  write_plain(dir.file("labels"), tiny.labels_file());
  IdxImages dataset(tiny_options(dir), {"train", 0});
  Batch batch;
  std::vector<std::int64_t> bad = {4};
  EXPECT_THROW(dataset.read(bad, batch), InternalError);
}

}  // namespace
}  // namespace aiacc::data
