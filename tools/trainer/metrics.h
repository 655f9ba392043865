// Running metrics over a stream of batches: mean loss and accuracy for every task; for binary
// (CTR) tasks also exact ROC AUC and log loss over everything added since the last reset().
// Meters merge, so ranks can evaluate shards and combine them (distributed evaluation). Also the
// writer of a run folder's metrics.jsonl (MetricsLog).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "core/batch.h"
#include "core/io/atomic_file.h"
#include "core/tensor.h"

namespace aiacc::trainer {

// Not thread-safe: one meter per thread, then merge().
class MetricMeter {
 public:
  explicit MetricMeter(Task task) : task_(task) {}

  // Adds one batch: its mean loss, the model's outputs and the labels.
  //   classification: outputs [N, C] logits (f32/f64), labels [N] i64 class ids.
  //   binary:         outputs with N elements ([N] or [N, 1]) of logits (f32/f64), labels [N]
  //                   0/1 targets (f32, f64 or i64; a target counts as positive when > 0.5).
  // For binary tasks every (logit, label) is kept until reset() (9 bytes per example) because
  // exact AUC needs the whole ranking. InternalError on mismatched sizes or dtypes.
  void add(double mean_loss, const Tensor& outputs, const Tensor& labels);

  // Adds the sums of `other` (same task; InternalError otherwise). Metrics of the merged meter
  // equal those of one meter that saw both streams.
  void merge(const MetricMeter& other);

  void reset() { *this = MetricMeter(task_); }
  // Everything the meter holds, as bytes (to gather the meters of several ranks), and back.
  // from_bytes throws InternalError on a malformed buffer.
  std::vector<std::byte> to_bytes() const;
  static MetricMeter from_bytes(Task task, std::span<const std::byte> bytes);

  // Example-weighted mean of the batches' mean losses; 0 before any example.
  double mean_loss() const { return examples_ ? loss_sum_ / static_cast<double>(examples_) : 0.0; }
  // Share of examples predicted right (binary: logit > 0 predicts 1); 0 before any example.
  double accuracy() const {
    return examples_ ? static_cast<double>(correct_) / static_cast<double>(examples_) : 0.0;
  }

  // Binary only. Exact ROC AUC: the probability that a random positive outscores a random
  // negative, ties counting one half (Mann-Whitney U / (P * N), i.e. average ranks). O(n log n).
  // NaN when it is undefined: not a binary task, no positives or no negatives (all one class),
  // or a NaN logit was added.
  double auc() const;
  // Binary only. Mean binary cross-entropy computed from the logits (stable for any logit, no
  // clamping of probabilities). NaN when not a binary task or before any example.
  double log_loss() const;

  std::int64_t examples() const { return examples_; }
  Task task() const { return task_; }

 private:
  void add_binary(const Tensor& outputs, const Tensor& labels);

  Task task_;
  double loss_sum_ = 0;
  std::int64_t correct_ = 0;
  std::int64_t examples_ = 0;
  // Binary task only.
  double log_loss_sum_ = 0;
  std::vector<double> scores_;           // logits, in arrival order
  std::vector<std::uint8_t> positives_;  // 1 where the label is positive
  bool saw_nan_score_ = false;
};

// Appends one JSON record per line to a metrics file (a run folder's metrics.jsonl). Each line
// goes out whole through write() calls checked at once (no stdio buffer to hide an error until a
// flush nobody checks): a full disk or any other failed write is an IoError naming the file and
// the OS error.
//   Writers::one (the training job, which holds the run folder's lock): a failed write is cut
//   back to the file's last complete line, so it never ends in a torn record, and opening drops
//   a torn last line an earlier process left (it died mid-record), so new records start on a
//   line of their own.
//   Writers::many (an --eval record added to a run another job may be training in): nothing is
//   ever cut, since the bytes at the end may be that job's record in the making. A record is one
//   write() with O_APPEND, which a local filesystem never interleaves with another appender's;
//   one that would follow a line without its newline starts with a newline of its own.
// Not thread-safe.
class MetricsLog {
 public:
  enum class Writers { one, many };

  MetricsLog() = default;
  explicit MetricsLog(const std::filesystem::path& path, Writers writers = Writers::one) { open(path, writers); }
  MetricsLog(MetricsLog&&) = default;
  MetricsLog& operator=(MetricsLog&&) = default;

  // Opens `path` for appending, creating it (mode 0644 before umask); a file open before is
  // closed first. IoError naming the path when it cannot be opened or repaired.
  void open(const std::filesystem::path& path, Writers writers = Writers::one);
  bool is_open() const { return fd_.valid(); }
  // Appends `record` (one line of JSON, without the newline: it is added). IoError naming the
  // file when it cannot be written whole; with Writers::one the file then ends with the
  // previous record.
  void append(std::string_view record);
  // Closes the file, reporting a delayed write error as IoError naming it. The destructor closes
  // too, but can only log such an error.
  void close();
  const std::filesystem::path& path() const { return path_; }

 private:
  void append_as_only_writer(const std::string& line);
  void append_beside_others(std::string line);
  // Whether the file is empty or ends with a newline (also true when it cannot be read, or is not
  // a regular file: no line break is added then).
  bool ends_with_newline() const;
  // Removes the `written` bytes a failed append left at the end of the file; false when it
  // cannot (not a regular file, or the file is shorter than that).
  bool cut_back(std::size_t written) const;

  std::filesystem::path path_;
  io::FileDescriptor fd_;
  Writers writers_ = Writers::one;
  bool regular_ = false;  // a regular file (not /dev/full, a pipe, ...): one that can be cut back
};

}  // namespace aiacc::trainer
