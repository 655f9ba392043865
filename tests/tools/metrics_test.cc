// MetricMeter: exact AUC against an O(n^2) pair count (ties at half credit), log loss against a
// float64 formula at extreme logits, the undefined cases, accuracy, and merge() == one meter.
// MetricsLog: whole lines, a full disk (/dev/full, a tiny tmpfs) is an IoError naming the file
// and never leaves a torn record, the file is looked at on open and on a failed write only;
// beside other writers (--eval) it never cuts the file.
#include "tools/trainer/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "tests/core/io/temp_dir.h"
#include "tests/testing/file_size_limit.h"

namespace {
std::atomic<int> g_fstat_calls{0};
}  // namespace

// Counts the fstat calls of the code under test (<sys/stat.h> maps fstat to fstat64 with 64-bit
// file offsets) and passes them on to the C library.
extern "C" int fstat64(int fd, struct stat64* info) noexcept {
  static const auto next = reinterpret_cast<int (*)(int, struct stat64*)>(::dlsym(RTLD_NEXT, "fstat64"));
  g_fstat_calls.fetch_add(1, std::memory_order_relaxed);
  return next(fd, info);
}

namespace aiacc::trainer {
namespace {

// AUC by definition: over all (positive, negative) pairs, 1 when the positive scores higher,
// 1/2 on a tie.
double brute_force_auc(const std::vector<float>& scores, const std::vector<float>& labels) {
  double credit = 0;
  double pairs = 0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (labels[i] < 0.5f) continue;
    for (std::size_t j = 0; j < scores.size(); ++j) {
      if (labels[j] > 0.5f) continue;
      pairs += 1;
      credit += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
    }
  }
  return credit / pairs;
}

// Textbook formula in long double, written differently from the implementation: clamp-free
// -y*log(p) - (1-y)*log(1-p) with p computed in extended precision, or the asymptote when p
// rounds to 0 or 1.
double reference_log_loss(const std::vector<float>& logits, const std::vector<float>& labels) {
  long double sum = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    long double x = logits[i];
    long double y = labels[i];
    // log(sigmoid(x)) = -log(1 + e^-x); log(1 - sigmoid(x)) = -log(1 + e^x).
    long double log_p = x < -40 ? x : -std::log1p(std::exp(-x));
    long double log_q = x > 40 ? -x : -std::log1p(std::exp(x));
    sum += -(y * log_p + (1 - y) * log_q);
  }
  return static_cast<double>(sum / logits.size());
}

void add(MetricMeter& meter, const std::vector<float>& logits, const std::vector<float>& labels,
         double mean_loss = 0.0) {
  const auto n = static_cast<std::int64_t>(logits.size());
  meter.add(mean_loss, Tensor::from_vector(logits, Shape{n, 1}),
            Tensor::from_vector(labels, Shape{n}));
}

TEST(MetricMeterTest, AucMatchesPairCountWithManyTies) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 50 + trial * 13;
    std::vector<float> scores(n), labels(n);
    // Scores from a small set of values so that ties are common, including ties across classes.
    std::uniform_int_distribution<int> level(-4, 4);
    std::bernoulli_distribution coin(0.3 + 0.02 * trial);
    for (int i = 0; i < n; ++i) {
      labels[i] = coin(rng) ? 1.0f : 0.0f;
      scores[i] =
          0.5f * static_cast<float>(level(rng)) + (labels[i] > 0 ? 0.25f * (trial % 3) : 0.0f);
    }
    MetricMeter meter(Task::binary);
    add(meter, scores, labels);
    EXPECT_NEAR(meter.auc(), brute_force_auc(scores, labels), 1e-12) << "trial " << trial;
  }
}

TEST(MetricMeterTest, AucHandCases) {
  MetricMeter perfect(Task::binary);
  add(perfect, {-2, -1, 1, 2}, {0, 0, 1, 1});
  EXPECT_DOUBLE_EQ(perfect.auc(), 1.0);
  MetricMeter inverted(Task::binary);
  add(inverted, {-2, -1, 1, 2}, {1, 1, 0, 0});
  EXPECT_DOUBLE_EQ(inverted.auc(), 0.0);
  MetricMeter all_tied(Task::binary);
  add(all_tied, {3, 3, 3, 3, 3}, {1, 0, 0, 1, 0});
  EXPECT_DOUBLE_EQ(all_tied.auc(), 0.5);
  // Positives at 0.3, 0.8; negatives at 0.3, 0.1: pairs (0.3>0.1)=1, (0.3=0.3)=.5, 0.8 beats both.
  MetricMeter mixed(Task::binary);
  add(mixed, {0.3f, 0.8f, 0.3f, 0.1f}, {1, 1, 0, 0});
  EXPECT_DOUBLE_EQ(mixed.auc(), 3.5 / 4.0);
}

TEST(MetricMeterTest, AucIsNanWhenUndefined) {
  MetricMeter empty(Task::binary);
  EXPECT_TRUE(std::isnan(empty.auc()));
  EXPECT_TRUE(std::isnan(empty.log_loss()));
  MetricMeter positives_only(Task::binary);
  add(positives_only, {0.1f, 2.0f}, {1, 1});
  EXPECT_TRUE(std::isnan(positives_only.auc()));
  EXPECT_FALSE(std::isnan(positives_only.log_loss()));
  MetricMeter negatives_only(Task::binary);
  add(negatives_only, {0.1f, 2.0f}, {0, 0});
  EXPECT_TRUE(std::isnan(negatives_only.auc()));
  MetricMeter nan_logit(Task::binary);
  add(nan_logit, {0.1f, NAN, 1.0f}, {0, 1, 1});
  EXPECT_TRUE(std::isnan(nan_logit.auc()));
  MetricMeter classification(Task::classification);
  EXPECT_TRUE(std::isnan(classification.auc()));
  EXPECT_TRUE(std::isnan(classification.log_loss()));
}

TEST(MetricMeterTest, LogLossIsStableAtExtremeLogits) {
  const std::vector<float> logits{0.0f,   1e-8f,   -3.5f, 20.0f, -20.0f, 50.0f,  -50.0f,
                                  100.0f, -100.0f, 1e4f,  -1e4f, 88.7f,  -88.8f, 1e30f};
  const std::vector<float> labels{1, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 1, 1, 0};
  MetricMeter meter(Task::binary);
  add(meter, logits, labels);
  const double expected = reference_log_loss(logits, labels);
  ASSERT_TRUE(std::isfinite(meter.log_loss()));
  EXPECT_NEAR(meter.log_loss(), expected, 1e-12 * expected);
  // A confident right answer costs almost nothing, without rounding to exactly 0 or log(0).
  MetricMeter confident(Task::binary);
  add(confident, {40.0f}, {1});
  EXPECT_GT(confident.log_loss(), 0.0);
  EXPECT_NEAR(confident.log_loss(), std::exp(-40.0), 1e-30);
  MetricMeter wrong(Task::binary);
  add(wrong, {-1000.0f}, {1});
  EXPECT_DOUBLE_EQ(wrong.log_loss(), 1000.0);
  // Outputs that overflowed f32 are certain: free where the label agrees (not inf - inf = NaN),
  // infinite where it does not.
  const float inf = std::numeric_limits<float>::infinity();
  MetricMeter certain(Task::binary);
  add(certain, {inf, -inf, 0.0f}, {1, 0, 1});
  EXPECT_NEAR(certain.log_loss(), std::log(2.0) / 3.0, 1e-15);
  MetricMeter certain_wrong(Task::binary);
  add(certain_wrong, {inf}, {0});
  EXPECT_EQ(certain_wrong.log_loss(), std::numeric_limits<double>::infinity());
}

TEST(MetricMeterTest, BinaryAccuracyAndMeanLoss) {
  MetricMeter meter(Task::binary);
  add(meter, {1, -1, 2, -2}, {1, 1, 0, 0}, /*mean_loss=*/0.5);
  add(meter, {3, 4}, {1, 1}, /*mean_loss=*/2.0);
  EXPECT_EQ(meter.examples(), 6);
  EXPECT_DOUBLE_EQ(meter.accuracy(), 4.0 / 6.0);
  EXPECT_DOUBLE_EQ(meter.mean_loss(), (0.5 * 4 + 2.0 * 2) / 6.0);
  // f64 logits and i64 labels are accepted too.
  MetricMeter other(Task::binary);
  other.add(0, Tensor::from_vector<double>({-1, 1}, Shape{2}),
            Tensor::from_vector<std::int64_t>({0, 1}, Shape{2}));
  EXPECT_DOUBLE_EQ(other.auc(), 1.0);
  EXPECT_DOUBLE_EQ(other.accuracy(), 1.0);
}

TEST(MetricMeterTest, ClassificationAccuracyIsUnchanged) {
  MetricMeter meter(Task::classification);
  meter.add(1.0, Tensor::from_vector<float>({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, Shape{3, 2}),
            Tensor::from_vector<std::int64_t>({1, 0, 0}, Shape{3}));
  EXPECT_DOUBLE_EQ(meter.accuracy(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(meter.mean_loss(), 1.0);
  meter.reset();
  EXPECT_EQ(meter.examples(), 0);
  EXPECT_EQ(meter.task(), Task::classification);
}

TEST(MetricMeterTest, MergeEqualsOneMeterOverAllData) {
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0.0f, 2.0f);
  std::bernoulli_distribution coin(0.4);
  MetricMeter whole(Task::binary);
  std::vector<MetricMeter> parts(3, MetricMeter(Task::binary));
  for (int batch = 0; batch < 12; ++batch) {
    std::vector<float> logits(17), labels(17);
    for (int i = 0; i < 17; ++i) {
      labels[i] = coin(rng) ? 1.0f : 0.0f;
      logits[i] = std::round(noise(rng) + labels[i]);  // rounded: ties across parts
    }
    add(whole, logits, labels, 0.1 * batch);
    add(parts[batch % 3], logits, labels, 0.1 * batch);
  }
  MetricMeter merged(Task::binary);
  for (const auto& part : parts) merged.merge(part);
  EXPECT_EQ(merged.examples(), whole.examples());
  EXPECT_DOUBLE_EQ(merged.auc(), whole.auc());
  EXPECT_NEAR(merged.log_loss(), whole.log_loss(), 1e-14);
  EXPECT_NEAR(merged.mean_loss(), whole.mean_loss(), 1e-14);
  EXPECT_DOUBLE_EQ(merged.accuracy(), whole.accuracy());
  EXPECT_THROW(merged.merge(MetricMeter(Task::classification)), InternalError);
}

using aiacc::testing::FileSizeLimit;
using aiacc::testing::read_bytes;
using aiacc::testing::TempDir;
using aiacc::testing::write_bytes;
using ::testing::HasSubstr;

std::string record(int step) {
  return fmt::format(R"({{"kind":"train","step":{},"loss":0.6931471805599453,"samples_per_s":12345.6}})",
                     step);
}

TEST(MetricsLogTest, AppendsWholeLinesToAnExistingFile) {
  TempDir dir;
  const auto path = dir / "metrics.jsonl";
  write_bytes(path, record(1) + "\n");
  {
    MetricsLog log(path);
    log.append(record(2));
    log.append(record(3));
    log.close();
    EXPECT_FALSE(log.is_open());
  }
  EXPECT_EQ(read_bytes(path), record(1) + "\n" + record(2) + "\n" + record(3) + "\n");
  MetricsLog log(path);
  EXPECT_THROW(log.append("{\"a\":1}\n{\"b\":2}"), InternalError);
}

// A run that died mid-record left a torn line; the next record must not be glued to it.
TEST(MetricsLogTest, OpeningDropsATornLastRecord) {
  TempDir dir;
  const auto path = dir / "metrics.jsonl";
  write_bytes(path, record(1) + "\n" + record(2).substr(0, 20));
  MetricsLog log(path);
  log.append(record(3));
  EXPECT_EQ(read_bytes(path), record(1) + "\n" + record(3) + "\n");

  write_bytes(path, "{\"kind\":\"tr");  // nothing complete at all
  log.open(path);
  log.append(record(4));
  EXPECT_EQ(read_bytes(path), record(4) + "\n");
}

// A record is one write(): the file is looked at when it is opened and again only when a write
// fails (it was fstat'd before every record, a system call per step for nothing).
TEST(MetricsLogTest, AppendingLooksAtTheFileOnlyWhenAWriteFails) {
  TempDir dir;
  const int before_open = g_fstat_calls.load();
  MetricsLog log(dir / "metrics.jsonl");
  if (g_fstat_calls.load() == before_open) GTEST_SKIP() << "this build's fstat calls are not counted here";
  const int after_open = g_fstat_calls.load();
  for (int step = 1; step <= 100; ++step) log.append(record(step));
  EXPECT_EQ(g_fstat_calls.load(), after_open);
}

// A write that fails part-way through a record (here at the file size limit: ulimit -f) is cut
// back to the records before it, by the file's size at the failure: the file was emptied
// between records (a log rotation), and a size kept from before would grow it with zeros.
TEST(MetricsLogTest, AFailedWriteIsCutBackEvenAfterTheFileWasEmptied) {
  TempDir dir;
  const auto path = dir / "metrics.jsonl";
  MetricsLog log(path);
  for (int step = 1; step <= 3; ++step) log.append(record(step));
  std::filesystem::resize_file(path, 0);
  std::string message;
  {
    FileSizeLimit limit(record(4).size() * 3 / 2);
    log.append(record(4));
    try {
      log.append(record(5));  // half of it fits
    } catch (const IoError& e) {
      message = e.what();
    }
  }
  EXPECT_THAT(message, HasSubstr(path.string()));
  EXPECT_THAT(message, HasSubstr("File too large"));
  EXPECT_THAT(message, HasSubstr("the file ends with the previous record"));
  EXPECT_EQ(read_bytes(path), record(4) + "\n");
}

// An --eval record goes into a run another job may be training in: a last line without its
// newline may be that job's record in the making, which a repair would cut (the record was lost).
// Nothing is cut; the evaluation's record starts on a line of its own.
TEST(MetricsLogTest, ASharedAppendLeavesAnIncompleteLastLineAlone) {
  TempDir dir;
  const auto path = dir / "metrics.jsonl";
  const std::string partial = record(1) + "\n" + record(2).substr(0, 20);
  write_bytes(path, partial);
  MetricsLog log(path, MetricsLog::Writers::many);
  log.append(record(3));
  EXPECT_EQ(read_bytes(path), partial + "\n" + record(3) + "\n");
  log.append(record(4));  // after a whole line: no newline added
  EXPECT_EQ(read_bytes(path), partial + "\n" + record(3) + "\n" + record(4) + "\n");
}

// Beside another writer a failed record is not cut back: the file's end may be another record
// by then, which the cut would take (its size less this record's bytes).
TEST(MetricsLogTest, ASharedAppendThatFailsPartWayCutsNothing) {
  TempDir dir;
  const auto path = dir / "metrics.jsonl";
  write_bytes(path, record(1) + "\n");
  MetricsLog log(path, MetricsLog::Writers::many);
  std::string message;
  try {
    FileSizeLimit limit(record(1).size() + 1 + 10);
    log.append(record(2));
  } catch (const IoError& e) {
    message = e.what();
  }
  EXPECT_THAT(message, HasSubstr(path.string()));
  EXPECT_THAT(message, HasSubstr("only 10 of the record's"));
  EXPECT_EQ(read_bytes(path), record(1) + "\n" + record(2).substr(0, 10));
}

// /dev/full fails every write with ENOSPC, as a full disk does.
TEST(MetricsLogTest, FullDeviceIsAnIoErrorNamingTheFile) {
  MetricsLog log("/dev/full");
  try {
    log.append(record(1));
    FAIL() << "a write to /dev/full succeeded";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/dev/full"));
    EXPECT_THAT(e.what(), HasSubstr("No space left on device"));
  }
}

// The reported case: job.run_dir on a 12 KiB tmpfs. metrics.jsonl stopped at 4096 bytes with a
// torn last record and the job exited 0.
TEST(MetricsLogTest, FullFileSystemIsAnIoErrorAndLeavesNoTornRecord) {
  TempDir dir;
  const auto mount_point = dir / "small";
  std::filesystem::create_directory(mount_point);
  if (::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=12k") != 0) {
    GTEST_SKIP() << "cannot mount a 12 KiB tmpfs here (mount: " << std::strerror(errno)
                 << "; needs root)";
  }
  struct Unmount {
    std::filesystem::path path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mount_point};
  const auto path = mount_point / "metrics.jsonl";
  MetricsLog log(path);
  std::string message;
  int written = 0;
  for (int step = 1; step <= 10000 && message.empty(); ++step) {
    try {
      log.append(record(step));
      written = step;
    } catch (const IoError& e) {
      message = e.what();
    }
  }
  ASSERT_FALSE(message.empty()) << "10000 records fitted in a 12 KiB file system";
  EXPECT_THAT(message, HasSubstr(path.string()));
  EXPECT_THAT(message, HasSubstr("No space left on device"));
  std::string expected;
  for (int step = 1; step <= written; ++step) expected += record(step) + "\n";
  EXPECT_EQ(read_bytes(path), expected) << "the file must end with the last complete record";
  EXPECT_THROW(log.append(record(written + 1)), IoError) << "still full";
  EXPECT_EQ(read_bytes(path), expected);
}

}  // namespace
}  // namespace aiacc::trainer
