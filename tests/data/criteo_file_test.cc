// Chunked parallel loading of Criteo TSV: results (examples, order, malformed line numbers, the
// first error) do not depend on the chunk size or the thread count; and, when tools/flights has
// been run, the real flights TSV (first 10k lines; the whole file in a disabled speed test).
#include "data/detail/criteo_file.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "data/criteo_tsv.h"
#include "tests/data/data_files.h"

namespace aiacc::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_text;

detail::CriteoLayout layout_3_3() {
  detail::CriteoLayout layout;
  layout.num_integer = 3;
  layout.num_categorical = 3;
  layout.integer_names = {"I1", "I2", "I3"};
  layout.categorical_names = {"C1", "C2", "C3"};
  return layout;
}

// ~3.5 MB: several 1 MiB pieces per chunk, so the parallel split is exercised. Lines whose number
// is a multiple of 7919 are malformed.
std::string big_text(std::int64_t lines) {
  std::string text;
  for (std::int64_t line = 1; line <= lines; ++line) {
    if (line % 7919 == 0) {
      text += fmt::format("1\t{}\tbad\t0\t\t\t\n", line);
    } else {
      text += fmt::format("{}\t{}\t{}\t\t{:08x}\t{:x}\t\n", line % 4 == 0 ? 1 : 0, line, -line, line * 2654435761u % 0xffffffffu, line % 97);
    }
  }
  return text;
}

TEST(CriteoFile, ChunkSizeAndThreadsDoNotChangeTheResult) {
  TempDir dir;
  const std::int64_t lines = 100000;
  write_text(dir.file("big.tsv"), big_text(lines));
  const detail::CriteoLayout layout = layout_3_3();

  detail::CriteoReadOptions reference_options;
  reference_options.skip_malformed = true;
  reference_options.threads = 1;
  detail::CriteoLoadReport reference_report;
  detail::CtrColumns reference = detail::read_criteo_file(dir.file("big.tsv"), layout, reference_options, reference_report);
  const std::int64_t bad = lines / 7919;
  ASSERT_EQ(reference.size(), lines - bad);
  EXPECT_EQ(reference_report.lines, lines);
  EXPECT_EQ(reference_report.malformed, bad);
  EXPECT_EQ(reference_report.malformed_lines, (std::vector<std::int64_t>{7919, 2 * 7919, 3 * 7919, 4 * 7919, 5 * 7919}));
  EXPECT_FLOAT_EQ(reference.integers[3 * 99], static_cast<float>(std::log1p(100.0)));  // example 99 is line 100

  struct Variant {
    std::size_t chunk_bytes;
    int threads;
  };
  for (Variant v : {Variant{std::size_t{64} << 20, 4}, Variant{(1u << 20) + 3, 3}, Variant{4096, 2}, Variant{7, 2}}) {
    SCOPED_TRACE(fmt::format("chunk {} bytes, {} threads", v.chunk_bytes, v.threads));
    detail::CriteoReadOptions o = reference_options;
    o.chunk_bytes = v.chunk_bytes;
    o.threads = v.threads;
    detail::CriteoLoadReport report;
    detail::CtrColumns columns = detail::read_criteo_file(dir.file("big.tsv"), layout, o, report);
    EXPECT_EQ(columns.labels, reference.labels);
    EXPECT_EQ(columns.integers, reference.integers);
    EXPECT_EQ(columns.categoricals, reference.categoricals);
    EXPECT_EQ(columns.missing, reference.missing);
    EXPECT_EQ(report.lines, reference_report.lines);
    EXPECT_EQ(report.malformed_lines, reference_report.malformed_lines);

    // Under `fail` the first malformed line is reported, whichever piece or chunk holds it.
    o.skip_malformed = false;
    try {
      detail::read_criteo_file(dir.file("big.tsv"), layout, o, report);
      ADD_FAILURE() << "no DataError";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr(dir.file("big.tsv") + ":7919: column 3 (I2): bad integer 'bad'"));
    }
  }
}

// A line far longer than any valid one (1 MiB of 'A'; the limit for 3 integer and 3
// categorical columns is 400 bytes) is malformed as soon as more of it than that is held
// across chunks (4 KiB here), instead of being buffered whole: a file without newlines was held
// in memory to its end. Skipping drops it up to its newline and goes on; a file that is one
// such line has no valid line.
TEST(CriteoFile, AnOverlongLineIsMalformedWithoutBeingBufferedWhole) {
  TempDir dir;
  const std::string good = "1\t5\t-3\t\t0000001f\t\tABCDEF12\n";
  const std::string overlong(std::size_t{1} << 20, 'A');
  write_text(dir.file("f.tsv"), good + good + good + overlong + "\n" + good);
  detail::CriteoReadOptions o;
  o.chunk_bytes = 4096;
  detail::CriteoLoadReport report;
  try {
    detail::read_criteo_file(dir.file("f.tsv"), layout_3_3(), o, report);
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir.file("f.tsv") + ":4: a line longer than 400 bytes: not a Criteo TSV line"));
  }
  o.skip_malformed = true;
  const detail::CtrColumns columns = detail::read_criteo_file(dir.file("f.tsv"), layout_3_3(), o, report);
  EXPECT_EQ(columns.size(), 4);
  EXPECT_EQ(report.lines, 5);
  EXPECT_EQ(report.malformed_lines, (std::vector<std::int64_t>{4}));
  write_text(dir.file("one.tsv"), overlong);
  try {
    detail::read_criteo_file(dir.file("one.tsv"), layout_3_3(), o, report);
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no valid line: all 1 lines are malformed (line 1: a line longer than"));
  }
}

TEST(CriteoFile, MissingValuesAreFlaggedPerField) {
  TempDir dir;
  write_text(dir.file("f.tsv"), "1\t\t\t\t\t0\t\n");
  detail::CriteoLoadReport report;
  detail::CtrColumns columns = detail::read_criteo_file(dir.file("f.tsv"), layout_3_3(), {}, report);
  EXPECT_EQ(columns.bytes_per_example(), 1u + 12 + 12 + 1);
  EXPECT_TRUE(columns.is_missing(0, 0));
  EXPECT_FALSE(columns.is_missing(0, 1));  // "0" is a value, not a missing one
  EXPECT_TRUE(columns.is_missing(0, 2));
}

// The flights TSV of tools/flights/fetch_flights.sh, when it has been generated.
std::string flights_file(const char* name) {
  const char* root = std::getenv("AIACC_SOURCE_ROOT");
  return (std::filesystem::path(root ? root : ".") / "data-cache" / "flights" / name).string();
}

CriteoTsv::Options flights_options() {
  CriteoTsv::Options o;
  o.train_file = flights_file("train.tsv");
  o.test_file = flights_file("test.tsv");
  o.num_integer = 5;
  o.num_categorical = 3;
  o.categorical_names = {"origin", "destination", "route"};
  return o;
}

TEST(CriteoTsvFlights, FirstTenThousandLines) {
  if (!std::filesystem::exists(flights_file("train.tsv"))) {
    GTEST_SKIP() << "no flights TSV: run tools/flights/fetch_flights.sh";
  }
  CriteoTsv::Options o = flights_options();
  o.limit = 10000;
  CriteoTsv train(o, {"train", 0});
  ASSERT_EQ(train.size(), 10000);
  std::vector<std::int64_t> all(10000);
  std::iota(all.begin(), all.end(), 0);
  Batch batch;
  train.read(all, batch);
  double positives = 0;
  for (float label : batch.labels.span<float>()) positives += label;
  // 20.9% late over the six months; the first 10k flights (1 January) run later than that.
  EXPECT_GT(positives / 10000, 0.1);
  EXPECT_LT(positives / 10000, 0.6);
  std::vector<float> x = batch.inputs.to_vector<float>();
  for (std::int64_t i = 0; i < 10000; ++i) {
    const float* row = x.data() + i * 5;
    EXPECT_GT(row[0], std::log1p(10.0f));                          // distance in miles
    EXPECT_LE(row[1], std::log1p(23.0f) + 1e-6f);                  // hour
    EXPECT_FLOAT_EQ(row[3], std::log1p(1.0f));                     // January
    EXPECT_FLOAT_EQ(row[4], std::log1p(1.0f));                     // the 1st
    for (int c = 0; c < 3; ++c) ASSERT_GE(batch.sparse[static_cast<std::size_t>(c)].ids[static_cast<std::size_t>(i)], 0);
  }
}

// The load speed of the whole train file (~115 MB, 2.7M lines):
//   build/tests/data/data_criteo_file_test --gtest_also_run_disabled_tests --gtest_filter='*Whole*'
TEST(CriteoTsvFlights, DISABLED_WholeTrainFileSpeed) {
  if (!std::filesystem::exists(flights_file("train.tsv"))) GTEST_SKIP() << "no flights TSV";
  CriteoTsv train(flights_options(), {"train", 0});
  const detail::CriteoLoadReport& r = train.load_report();
  std::printf("%lld examples, %.1f MB in %.3f s: %.0f MB/s, %.2fM lines/s, %d threads\n",
              static_cast<long long>(train.size()), static_cast<double>(r.bytes) / 1e6, r.seconds,
              static_cast<double>(r.bytes) / 1e6 / r.seconds, static_cast<double>(r.lines) / 1e6 / r.seconds, r.threads);
  EXPECT_EQ(train.size(), r.lines);
}

}  // namespace
}  // namespace aiacc::data
