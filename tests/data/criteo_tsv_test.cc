// criteo_tsv: exact read-back of generated TSV files (labels, log1p integers, hex ids, -1 for
// missing), custom column counts and names, both malformed-line policies with file:line:column
// messages, line-end variants, bad files, limit, gzip, config checks and the Loader on CTR data.
#include "data/criteo_tsv.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <set>

#include <sys/wait.h>
#include <unistd.h>

#include "core/config/node.h"
#include "core/error.h"
#include "data/data_options.h"
#include "data/loader.h"
#include "tests/data/ctr_examples.h"
#include "tests/data/data_files.h"

namespace aiacc::data {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::CtrExamples;
using testing::read_scrambled;
using testing::TempDir;
using testing::write_text;

CriteoTsv::Options options_for(const std::string& path, int num_integer = 3, int num_categorical = 3) {
  CriteoTsv::Options o;
  o.train_file = path;
  o.test_file = path;
  o.num_integer = num_integer;
  o.num_categorical = num_categorical;
  return o;
}

Batch read_all(Dataset& dataset) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(dataset.size()));
  std::iota(all.begin(), all.end(), 0);
  Batch batch;
  dataset.read(all, batch);
  return batch;
}

std::string data_error(const CriteoTsv::Options& o) {
  try {
    CriteoTsv dataset(o, {"train", 0});
  } catch (const DataError& e) {
    return e.what();
  }
  return "<no DataError>";
}

float log1p_f(double x) { return static_cast<float>(std::log1p(x)); }

// Three integer and three categorical columns covering every value kind.
constexpr const char* kThreeLines =
    "1\t5\t-3\t\t0000001f\t\tABCDEF12\n"
    "0\t0\t4095\t123456789\tffffffff\t00000000\t7\n"
    "0\t\t\t\t\t\t\n";

TEST(CriteoTsv, ExactContentOfEveryValueKind) {
  TempDir dir;
  write_text(dir.file("f.tsv"), kThreeLines);
  CriteoTsv dataset(options_for(dir.file("f.tsv")), {"train", 0});
  ASSERT_EQ(dataset.size(), 3);
  EXPECT_FALSE(dataset.reference_auc().has_value());
  InputSpec spec = dataset.spec();
  EXPECT_EQ(spec.task, Task::binary);
  EXPECT_EQ(spec.example_shape, (Shape{3}));
  EXPECT_EQ(spec.num_classes, 0);
  EXPECT_THAT(spec.sparse_fields, ElementsAre("C1", "C2", "C3"));

  Batch batch = read_all(dataset);
  EXPECT_EQ(batch.labels.dtype(), DType::f32);
  EXPECT_EQ(batch.labels.to_vector<float>(), (std::vector<float>{1, 0, 0}));
  ASSERT_EQ(batch.inputs.shape(), (Shape{3, 3}));
  std::vector<float> x = batch.inputs.to_vector<float>();
  // log1p(max(x, 0)); empty reads as 0; 4095 is the last value of the lookup table.
  EXPECT_FLOAT_EQ(x[0], log1p_f(5));
  EXPECT_EQ(x[1], 0.0f);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_EQ(x[3], 0.0f);
  EXPECT_FLOAT_EQ(x[4], log1p_f(4095));
  EXPECT_FLOAT_EQ(x[5], log1p_f(123456789));
  for (int i = 6; i < 9; ++i) EXPECT_EQ(x[static_cast<std::size_t>(i)], 0.0f);

  ASSERT_EQ(batch.sparse.size(), 3u);
  EXPECT_EQ(batch.sparse[0].ids, (std::vector<std::int64_t>{0x1f, 0xffffffffll, -1}));
  EXPECT_EQ(batch.sparse[1].ids, (std::vector<std::int64_t>{-1, 0, -1}));
  EXPECT_EQ(batch.sparse[2].ids, (std::vector<std::int64_t>{0xabcdef12ll, 7, -1}));
  for (const SparseField& field : batch.sparse) EXPECT_EQ(field.offsets, (std::vector<std::int64_t>{0, 1, 2, 3}));

  // Any order, repeats allowed.
  std::vector<std::int64_t> picked = {2, 0, 0};
  dataset.read(picked, batch);
  EXPECT_EQ(batch.labels.to_vector<float>(), (std::vector<float>{0, 1, 1}));
  EXPECT_EQ(batch.sparse[2].ids, (std::vector<std::int64_t>{-1, 0xabcdef12ll, 0xabcdef12ll}));
  std::vector<std::int64_t> outside = {3};
  EXPECT_THROW(dataset.read(outside, batch), InternalError);
}

TEST(CriteoTsv, CriteoDefaultsThirteenPlusTwentySix) {
  TempDir dir;
  std::string line = "1";
  for (int i = 1; i <= 13; ++i) line += fmt::format("\t{}", i);
  for (int c = 1; c <= 26; ++c) line += c == 7 ? std::string("\t") : fmt::format("\t{:08x}", 1000 + c);
  write_text(dir.file("criteo.txt"), fmt::format("{0}\n{0}\n", line));
  CriteoTsv::Options o;
  o.train_file = dir.file("criteo.txt");
  CriteoTsv dataset(o, {"train", 0});
  InputSpec spec = dataset.spec();
  EXPECT_EQ(spec.example_shape, (Shape{13}));
  ASSERT_EQ(spec.sparse_fields.size(), 26u);
  EXPECT_EQ(spec.sparse_fields.front(), "C1");
  EXPECT_EQ(spec.sparse_fields.back(), "C26");
  Batch batch = read_all(dataset);
  EXPECT_FLOAT_EQ(batch.inputs.to_vector<float>()[12], log1p_f(13));
  EXPECT_EQ(batch.sparse[0].ids[0], 1001);
  EXPECT_EQ(batch.sparse[6].ids[0], -1);
  EXPECT_EQ(batch.sparse[25].ids[1], 1026);
  EXPECT_EQ(dataset.load_report().lines, 2);
}

TEST(CriteoTsv, CustomCountsAndNamesAsInFlights) {
  TempDir dir;
  write_text(dir.file("flights.tsv"), "1\t2176\t0\t1\t1\t1\t963a9277\t93f9c22b\t66c5196e\n");
  CriteoTsv::Options o = options_for(dir.file("flights.tsv"), 5, 3);
  o.categorical_names = {"origin", "destination", "route"};
  CriteoTsv dataset(o, {"test", 0});
  EXPECT_EQ(dataset.spec().example_shape, (Shape{5}));
  EXPECT_THAT(dataset.spec().sparse_fields, ElementsAre("origin", "destination", "route"));
  Batch batch = read_all(dataset);
  EXPECT_FLOAT_EQ(batch.inputs.to_vector<float>()[0], log1p_f(2176));
  EXPECT_EQ(batch.sparse[2].ids[0], 0x66c5196e);
}

TEST(CriteoTsv, MalformedLineFailsNamingFileLineAndColumn) {
  TempDir dir;
  const std::string good = "1\t1\t2\t3\ta\tb\tc\n";
  const std::string path = dir.file("f.tsv");
  auto error_for = [&](const std::string& bad_line) {
    write_text(path, good + good + bad_line + "\n" + good);
    return data_error(options_for(path));
  };
  EXPECT_THAT(error_for("1\t2\t3"),
              HasSubstr(path + ":3: expected 7 tab-separated columns (label, 3 integer, 3 categorical), found 3"));
  EXPECT_THAT(error_for("1\t1\t1\t1\ta\tb\tc\td"), HasSubstr(path + ":3: expected 7 tab-separated columns"));
  EXPECT_THAT(error_for(""), HasSubstr(path + ":3: expected 7 tab-separated columns (label, 3 integer, 3 categorical), "
                                      "found an empty line"));
  EXPECT_THAT(error_for("1\t1\t2\t3\ta\tzz\tc"),
              HasSubstr(path + ":3: column 6 (C2): bad categorical value 'zz', expected up to 8 hex digits"));
  EXPECT_THAT(error_for("1\t1\t2\t3\ta\tb\t123456789"), HasSubstr(":3: column 7 (C3): bad categorical value '123456789'"));
  EXPECT_THAT(error_for("1\t1\t2\t3\t-1\tb\tc"), HasSubstr(":3: column 5 (C1): bad categorical value '-1'"));
  EXPECT_THAT(error_for("1\t1\t1.5\t3\ta\tb\tc"), HasSubstr(path + ":3: column 3 (I2): bad integer '1.5'"));
  EXPECT_THAT(error_for("1\tx\t2\t3\ta\tb\tc"), HasSubstr(":3: column 2 (I1): bad integer 'x'"));
  EXPECT_THAT(error_for("1\t1\t2\t99999999999999999999\ta\tb\tc"),
              HasSubstr(":3: column 4 (I3): integer out of range '99999999999999999999'"));
  EXPECT_THAT(error_for("2\t1\t2\t3\ta\tb\tc"), HasSubstr(path + ":3: column 1 (label): expected 0 or 1, got '2'"));
  EXPECT_THAT(error_for("\t1\t2\t3\ta\tb\tc"), HasSubstr(":3: column 1 (label): expected 0 or 1, got ''"));
  EXPECT_THAT(error_for("label\tI1\tI2\tI3\tC1\tC2\tC3"), HasSubstr(":3: column 1 (label): expected 0 or 1, got 'label'"));
  // A long field is shown cut short.
  EXPECT_THAT(error_for("1\t1\t2\t3\ta\tb\t" + std::string(100, 'q')), HasSubstr("'qqqqqqqqqqqqqqqqqqqqqqqq...'"));
}

TEST(CriteoTsv, SkipPolicyDropsCountsAndReportsMalformedLines) {
  TempDir dir;
  std::string text;
  std::vector<float> expected_labels;
  for (int line = 1; line <= 10; ++line) {
    if (line == 2) text += "1\t1\t2\n";
    else if (line == 5) text += "1\t1\t2\t3\ta\tnothex\tc\n";
    else if (line == 9) text += "7\t1\t2\t3\ta\tb\tc\n";
    else {
      text += fmt::format("{}\t{}\t0\t0\t{:x}\t\t\n", line % 2, line, line);
      expected_labels.push_back(static_cast<float>(line % 2));
    }
  }
  write_text(dir.file("f.tsv"), text);
  CriteoTsv::Options o = options_for(dir.file("f.tsv"));
  o.malformed = "skip";
  CriteoTsv dataset(o, {"train", 0});
  ASSERT_EQ(dataset.size(), 7);
  const detail::CriteoLoadReport& report = dataset.load_report();
  EXPECT_EQ(report.lines, 10);
  EXPECT_EQ(report.malformed, 3);
  EXPECT_EQ(report.malformed_lines, (std::vector<std::int64_t>{2, 5, 9}));
  EXPECT_THAT(report.first_malformed, HasSubstr("expected 7 tab-separated columns"));
  Batch batch = read_all(dataset);
  EXPECT_EQ(batch.labels.to_vector<float>(), expected_labels);
  EXPECT_EQ(batch.sparse[0].ids, (std::vector<std::int64_t>{1, 3, 4, 6, 7, 8, 10}));

  // Nothing valid at all is an error even when skipping.
  write_text(dir.file("bad.tsv"), "x\n1\t2\n");
  o.train_file = dir.file("bad.tsv");
  EXPECT_THAT(data_error(o), HasSubstr(dir.file("bad.tsv") + ": no valid line: all 2 lines are malformed (line 1: "));
}

TEST(CriteoTsv, CrlfLineEndsAndMissingFinalNewline) {
  TempDir dir;
  write_text(dir.file("f.tsv"), "1\t1\t\t3\ta\tb\t0000000c\r\n0\t\t2\t\t\t\t0000000d\r\n1\t7\t8\t9\t1\t2\t3");
  CriteoTsv dataset(options_for(dir.file("f.tsv")), {"train", 0});
  ASSERT_EQ(dataset.size(), 3);
  Batch batch = read_all(dataset);
  EXPECT_EQ(batch.sparse[2].ids, (std::vector<std::int64_t>{12, 13, 3}));
  EXPECT_EQ(batch.labels.to_vector<float>(), (std::vector<float>{1, 0, 1}));
  EXPECT_FLOAT_EQ(batch.inputs.to_vector<float>()[8], log1p_f(9));

  write_text(dir.file("cr.tsv"), "1\t1\t2\t3\ta\tb\tc\r");  // a lone CR before the end of file
  EXPECT_EQ(CriteoTsv(options_for(dir.file("cr.tsv")), {"train", 0}).size(), 1);
}

// A file behind a directory this user may not enter is "cannot access: Permission denied",
// not "no such file". Root passes every permission check, so the reading runs in a child that
// drops to user nobody (skipped where it cannot).
TEST(CriteoTsv, AFileThisUserMayNotReachIsNotReportedMissing) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("locked"));
  write_text(dir.file("locked/train.tsv"), kThreeLines);
  std::filesystem::permissions(dir.path(), std::filesystem::perms::all, std::filesystem::perm_options::add);
  std::filesystem::permissions(dir.file("locked"), std::filesystem::perms::owner_all, std::filesystem::perm_options::replace);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string message = "skip";
    if (getuid() != 0 || (setgid(65534) == 0 && setuid(65534) == 0)) {
      message = data_error(options_for(dir.file("locked/train.tsv")));
    }
    (void)!write(pipe_fds[1], message.data(), message.size());
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string message;
  char buffer[512];
  for (ssize_t got; (got = read(pipe_fds[0], buffer, sizeof buffer)) > 0;) message.append(buffer, static_cast<std::size_t>(got));
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (message == "skip") GTEST_SKIP() << "cannot drop to user nobody";
  EXPECT_THAT(message, HasSubstr(dir.file("locked/train.tsv") + ": cannot access: Permission denied"));
}

// A file no restart can make readable (missing, a folder, a device, empty) is a configuration
// error naming the key and the path (the job exits 2 and is not restarted); what it holds is data.
TEST(CriteoTsv, UnusableFilesAreConfigErrorsNamingTheKey) {
  TempDir dir;
  const auto config_error = [](const CriteoTsv::Options& o, const char* split) {
    try {
      CriteoTsv dataset(o, {split, 0});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<no ConfigError>");
  };
  EXPECT_EQ(config_error(options_for(dir.file("nope.tsv")), "train"),
            "data.train.criteo_tsv.train_file: " + dir.file("nope.tsv") + ": no such file");
  EXPECT_EQ(config_error(options_for(dir.file("nope/test.tsv")), "test"),
            "data.test.criteo_tsv.test_file: " + dir.file("nope/test.tsv") + ": no such file");
  EXPECT_EQ(config_error(options_for(dir.path()), "train"),
            "data.train.criteo_tsv.train_file: " + dir.path() + ": a folder, not a regular file");
  EXPECT_EQ(config_error(options_for("/dev/null"), "train"),
            "data.train.criteo_tsv.train_file: /dev/null: not a regular file");
  write_text(dir.file("empty.tsv"), "");
  EXPECT_EQ(config_error(options_for(dir.file("empty.tsv")), "train"),
            "data.train.criteo_tsv.train_file: " + dir.file("empty.tsv") + ": empty file");
}

// A relative path is read from the working directory, which a missing file's error names; a
// file of the flights fetch script's folder names the script.
TEST(CriteoTsv, AMissingRelativeFileNamesTheWorkingDirectoryAndTheFlightsScript) {
  const std::string cwd = std::filesystem::current_path().string();
  try {
    CriteoTsv dataset(options_for("no-such-folder/flights/train.tsv"), {"train", 0});
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "data.train.criteo_tsv.train_file: no-such-folder/flights/train.tsv: no such file (relative to the "
              "working directory " + cwd + "; make the flights data with tools/flights/fetch_flights.sh)");
  }
}

TEST(CriteoTsv, BadFilesNameTheFile) {
  TempDir dir;
  // Empty content behind a non-empty file is the data's fault.
  testing::write_gzip(dir.file("empty.tsv.gz"), {});
  EXPECT_THAT(data_error(options_for(dir.file("empty.tsv.gz"))),
              HasSubstr(dir.file("empty.tsv.gz") + ": empty file, expected Criteo TSV lines (7 columns"));
  // A file cut in the middle of its last line.
  write_text(dir.file("cut.tsv"), std::string(kThreeLines) + "1\t2\t3\tab");
  EXPECT_THAT(data_error(options_for(dir.file("cut.tsv"))), HasSubstr(dir.file("cut.tsv") + ":4: expected 7 tab-separated columns"));
  // A gzip stream cut short.
  testing::write_gzip(dir.file("full.gz"), std::vector<std::uint8_t>(kThreeLines, kThreeLines + std::strlen(kThreeLines)));
  std::ifstream in(dir.file("full.gz"), std::ios::binary);
  std::vector<std::uint8_t> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  testing::write_plain(dir.file("cut.gz"), gz);
  EXPECT_THAT(data_error(options_for(dir.file("cut.gz"))), HasSubstr(dir.file("cut.gz") + ": corrupt or truncated gzip data"));
}

TEST(CriteoTsv, GzipReadsLikePlain) {
  TempDir dir;
  write_text(dir.file("f.tsv"), kThreeLines);
  testing::write_gzip(dir.file("f.tsv.gz"), std::vector<std::uint8_t>(kThreeLines, kThreeLines + std::strlen(kThreeLines)));
  CriteoTsv plain(options_for(dir.file("f.tsv")), {"train", 0});
  CriteoTsv gzipped(options_for(dir.file("f.tsv.gz")), {"train", 0});
  Batch a = read_all(plain), b = read_all(gzipped);
  EXPECT_EQ(a.inputs.to_vector<float>(), b.inputs.to_vector<float>());
  for (int c = 0; c < 3; ++c) EXPECT_EQ(a.sparse[static_cast<std::size_t>(c)].ids, b.sparse[static_cast<std::size_t>(c)].ids);
}

TEST(CriteoTsv, LimitStopsBeforeLaterMalformedLines) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 5; ++i) text += fmt::format("{}\t{}\t0\t0\t{:x}\t\t\n", i % 2, i, i);
  text += "broken\n";
  write_text(dir.file("f.tsv"), text);
  CriteoTsv::Options o = options_for(dir.file("f.tsv"));
  o.limit = 3;
  CriteoTsv limited(o, {"train", 0});
  EXPECT_EQ(limited.size(), 3);
  EXPECT_EQ(read_all(limited).sparse[0].ids, (std::vector<std::int64_t>{0, 1, 2}));
  o.limit = 10;
  EXPECT_THAT(data_error(o), HasSubstr(":6: expected 7 tab-separated columns"));
  o.malformed = "skip";
  EXPECT_EQ(CriteoTsv(o, {"train", 0}).size(), 5);
}

TEST(CriteoTsv, ConfigThroughTheDataSection) {
  TempDir dir;
  write_text(dir.file("train.tsv"), kThreeLines);
  write_text(dir.file("test.tsv"), "1\t1\t1\t1\t1\t1\t1\n");
  auto parse = [](const std::string& text) {
    return config::read<DataOptions>(config::Document::from_string(text, "job.yaml").root());
  };
  DataOptions o = parse(fmt::format(
      "train: {{type: criteo_tsv, criteo_tsv: {{train_file: {0}, test_file: {1}, num_integer: 3, num_categorical: 3, "
      "categorical_names: [a, b, c]}}}}\n"
      "test: {{type: criteo_tsv, criteo_tsv: {{test_file: {1}, num_integer: 3, num_categorical: 3}}}}\n",
      dir.file("train.tsv"), dir.file("test.tsv")));
  auto train = make_dataset(o.train, {"train", 0});
  auto test = make_dataset(o.test, {"test", 0});
  EXPECT_EQ(train->size(), 3);
  EXPECT_EQ(test->size(), 1);
  EXPECT_THAT(train->spec().sparse_fields, ElementsAre("a", "b", "c"));
  // The train split of the second block has no train_file.
  EXPECT_THROW(make_dataset(o.test, {"train", 0}), ConfigError);

  auto config_error = [&](const std::string& text) {
    try {
      parse(text);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<no ConfigError>");
  };
  EXPECT_THAT(config_error("train:\n  criteo_tsv: {num_categorical: 3, categorical_names: [a, b]}\n"),
              HasSubstr("job.yaml:2:55: train.criteo_tsv.categorical_names: 2 names for num_categorical = 3 columns"));
  EXPECT_THAT(config_error("train:\n  criteo_tsv: {num_categorical: 2, categorical_names: [a, a]}\n"),
              HasSubstr("'a' appears twice"));
  EXPECT_THAT(config_error("train:\n  criteo_tsv: {malformed: skp}\n"), HasSubstr("did you mean 'skip'"));
  EXPECT_THAT(config_error("train:\n  criteo_tsv: {num_integer: 0, num_categorical: 0}\n"), HasSubstr("no features"));
}

// read_scrambled() of the one file `path`.
CtrExamples read_file_scrambled(const std::string& path) {
  CriteoTsv dataset(options_for(path), {"train", 0});
  return read_scrambled(dataset);
}

// Line i of a three-plus-three-column file, different for every i.
std::string numbered_line(int i) {
  return fmt::format("{}\t{}\t{}\t\t{:08x}\t{}\t{:08x}\n", i % 2, i, -i, 0x100 + i, i % 3 == 0 ? "" : "0000abcd",
                     i * 17);
}

std::string numbered_lines(int from, int to) {
  std::string text;
  for (int i = from; i < to; ++i) text += numbered_line(i);
  return text;
}

CriteoTsv::Options files_options(const std::vector<std::string>& files) {
  CriteoTsv::Options o = options_for("");
  o.train_file.clear();
  o.train_files = files;
  return o;
}

TEST(CriteoTsv, SeveralFilesReadAsOneFileMadeOfThem) {
  TempDir dir;
  write_text(dir.file("a.tsv"), numbered_lines(0, 3));
  const std::string b = numbered_lines(3, 5);
  testing::write_gzip(dir.file("b.tsv.gz"), std::vector<std::uint8_t>(b.begin(), b.end()));
  write_text(dir.file("c.tsv"), numbered_lines(5, 9));
  write_text(dir.file("all.tsv"), numbered_lines(0, 9));
  const CtrExamples one = read_file_scrambled(dir.file("all.tsv"));
  CriteoTsv three(files_options({dir.file("a.tsv"), dir.file("b.tsv.gz"), dir.file("c.tsv")}), {"train", 0});
  ASSERT_EQ(three.size(), 9);
  EXPECT_EQ(three.num_files(), 3u);
  EXPECT_EQ(three.path(1), dir.file("b.tsv.gz"));
  EXPECT_EQ(three.load_report(2).lines, 4);
  EXPECT_EQ(read_scrambled(three), one);
  Batch batch;
  std::vector<std::int64_t> outside = {9};
  EXPECT_THROW(three.read(outside, batch), InternalError);

  // Each file with a column cache of its own, mapped at the next load.
  CriteoTsv::Options cached = files_options({dir.file("a.tsv"), dir.file("b.tsv.gz"), dir.file("c.tsv")});
  cached.cache_dir = dir.file("cache");
  CriteoTsv built(cached, {"train", 0});
  CriteoTsv mapped(cached, {"train", 0});
  for (std::size_t f = 0; f < 3; ++f) EXPECT_EQ(mapped.load_how(f), detail::CachedCtrColumns::How::mapped);
  EXPECT_EQ(read_scrambled(mapped), one);
}

TEST(CriteoTsv, PatternsExpandInNaturalOrderAndALimitSpansFiles) {
  TempDir dir;
  write_text(dir.file("day_1.tsv"), numbered_lines(0, 3));
  write_text(dir.file("day_2.tsv"), numbered_lines(3, 5));
  write_text(dir.file("day_10.tsv"), numbered_lines(5, 9));
  write_text(dir.file("other.tsv"), numbered_lines(100, 101));
  fs::create_directories(dir.file("day_3.tsv"));  // a folder the pattern matches: left out
  write_text(dir.file("all.tsv"), numbered_lines(0, 9) + numbered_line(100));
  CriteoTsv glob(files_options({dir.file("day_*.tsv"), dir.file("other.tsv")}), {"train", 0});
  ASSERT_EQ(glob.num_files(), 4u);
  EXPECT_EQ(glob.path(0), dir.file("day_1.tsv"));
  EXPECT_EQ(glob.path(1), dir.file("day_2.tsv"));
  EXPECT_EQ(glob.path(2), dir.file("day_10.tsv"));
  EXPECT_EQ(read_scrambled(glob), read_file_scrambled(dir.file("all.tsv")));

  // limit 4: three lines of day_1 and one of day_2; day_10 and other.tsv are not read.
  CriteoTsv::Options limited = files_options({dir.file("day_*.tsv"), dir.file("other.tsv")});
  limited.limit = 4;
  CriteoTsv first_four(limited, {"train", 0});
  EXPECT_EQ(first_four.size(), 4);
  EXPECT_EQ(first_four.num_files(), 2u);
  write_text(dir.file("four.tsv"), numbered_lines(0, 4));
  EXPECT_EQ(read_scrambled(first_four), read_file_scrambled(dir.file("four.tsv")));

  // Column caches kept in the data's own folder match the pattern too: they are left out.
  CriteoTsv::Options cached = files_options({dir.file("day_*.tsv*")});
  cached.cache_dir = dir.path();
  CriteoTsv built(cached, {"train", 0});
  CriteoTsv mapped(cached, {"train", 0});
  ASSERT_EQ(mapped.num_files(), 3u);
  for (std::size_t f = 0; f < 3; ++f) EXPECT_EQ(mapped.load_how(f), detail::CachedCtrColumns::How::mapped);
  write_text(dir.file("nine"), numbered_lines(0, 9));
  EXPECT_EQ(read_scrambled(mapped), read_file_scrambled(dir.file("nine")));
}

TEST(CriteoTsv, FileListsAreCheckedNamingTheEntry) {
  TempDir dir;
  write_text(dir.file("a.tsv"), numbered_lines(0, 3));
  auto config_error = [](const CriteoTsv::Options& o) {
    try {
      CriteoTsv dataset(o, {"train", 0});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<no ConfigError>");
  };
  EXPECT_THAT(config_error(files_options({dir.file("a.tsv"), dir.file("day_*.tsv")})),
              HasSubstr("data.train.criteo_tsv.train_files[1]: " + dir.file("day_*.tsv") + " matches no file"));
  EXPECT_THAT(config_error(files_options({dir.file("a.tsv"), dir.file("*.tsv")})),
              HasSubstr("data.train.criteo_tsv.train_files[1]: " + dir.file("a.tsv") +
                        " is named by data.train.criteo_tsv.train_files[0] already"));
  EXPECT_THAT(config_error(files_options({dir.file("a.tsv"), dir.file("b.tsv")})),
              HasSubstr("data.train.criteo_tsv.train_files[1]: " + dir.file("b.tsv") + ": no such file"));
  EXPECT_THAT(config_error(files_options({dir.file("nope/day_*.tsv")})),
              HasSubstr("data.train.criteo_tsv.train_files[0]: " + dir.file("nope/day_*.tsv") + " matches no file"));
  // The same file through another spelling of its path, and through a link.
  fs::create_symlink(dir.file("a.tsv"), dir.file("link.tsv"));
  EXPECT_THAT(config_error(files_options({dir.file("a.tsv"), dir.path() + "/./a.tsv"})),
              HasSubstr("is named by data.train.criteo_tsv.train_files[0] already"));
  EXPECT_THAT(config_error(files_options({dir.file("a.tsv"), dir.file("link.tsv")})),
              HasSubstr("data.train.criteo_tsv.train_files[1]: " + dir.file("link.tsv") +
                        " is named by data.train.criteo_tsv.train_files[0] already"));
  CriteoTsv::Options neither = files_options({});
  EXPECT_THAT(config_error(neither), HasSubstr("data.train.criteo_tsv.train_file is not set"));

  auto parse_error = [](const std::string& text) {
    try {
      config::read<DataOptions>(config::Document::from_string(text, "job.yaml").root());
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<no ConfigError>");
  };
  EXPECT_THAT(parse_error("train:\n  criteo_tsv: {train_file: a.tsv, train_files: [b.tsv]}\n"),
              HasSubstr("train.criteo_tsv.train_files: train_file is set too"));
}

TEST(CriteoTsv, LoaderShardsCtrBatchesAcrossRanks) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 11; ++i) text += fmt::format("{}\t{}\t\t\t{:x}\t\t{:x}\n", i % 3 == 0 ? 1 : 0, i, i, 100 + i);
  write_text(dir.file("f.tsv"), text);
  CriteoTsv dataset(options_for(dir.file("f.tsv")), {"train", 0});
  LoaderOptions o;
  o.batch_size = 2;
  o.shuffle = true;
  o.drop_last = false;
  std::multiset<std::int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    Loader loader(dataset, o, rank, 2);
    loader.start_epoch(0);
    while (auto batch = loader.next()) {
      const std::int64_t n = batch->size();
      ASSERT_EQ(batch->labels.dtype(), DType::f32);
      ASSERT_EQ(batch->inputs.shape(), (Shape{n, 3}));
      ASSERT_EQ(batch->sparse.size(), 3u);
      std::vector<float> labels = batch->labels.to_vector<float>();
      std::vector<float> inputs = batch->inputs.to_vector<float>();
      for (const SparseField& field : batch->sparse) {
        ASSERT_EQ(field.offsets.size(), static_cast<std::size_t>(n + 1));
        for (std::int64_t i = 0; i <= n; ++i) EXPECT_EQ(field.offsets[static_cast<std::size_t>(i)], i);
      }
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t id = batch->sparse[0].ids[static_cast<std::size_t>(i)];
        seen.insert(id);
        // Every part of an example travels together.
        EXPECT_EQ(labels[static_cast<std::size_t>(i)], id % 3 == 0 ? 1.0f : 0.0f);
        EXPECT_FLOAT_EQ(inputs[static_cast<std::size_t>(i) * 3], log1p_f(static_cast<double>(id)));
        EXPECT_EQ(batch->sparse[1].ids[static_cast<std::size_t>(i)], -1);
        EXPECT_EQ(batch->sparse[2].ids[static_cast<std::size_t>(i)], 100 + id);
      }
    }
  }
  std::multiset<std::int64_t> expected;
  for (int i = 0; i < 11; ++i) expected.insert(i);
  EXPECT_EQ(seen, expected);
}

}  // namespace
}  // namespace aiacc::data
