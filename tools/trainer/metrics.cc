// MetricMeter: accuracy by argmax (classification) or sign (binary), exact AUC by sorting, and
// log loss from logits. MetricsLog: checked, whole-line appends, alone or beside other writers.
#include "tools/trainer/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/util/exact_auc.h"

namespace aiacc::trainer {

namespace {

std::int64_t count_correct_classes(const Tensor& outputs, const Tensor& labels) {
  AIACC_CHECK(outputs.rank() == 2, "classification outputs must be [N, C], got {}",
              outputs.shape().str());
  const std::int64_t n = labels.dim(0);
  const std::int64_t classes = outputs.dim(1);
  const std::int64_t* label = labels.data<std::int64_t>();
  auto count = [&](const auto* out) {
    std::int64_t correct = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t best = 0;
      for (std::int64_t c = 1; c < classes; ++c) {
        if (out[i * classes + c] > out[i * classes + best]) best = c;
      }
      correct += best == label[i];
    }
    return correct;
  };
  return outputs.dtype() == DType::f64 ? count(outputs.data<double>())
                                       : count(outputs.data<float>());
}

double element(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::f64: return t.data<double>()[i];
    case DType::i64: return static_cast<double>(t.data<std::int64_t>()[i]);
    default: return t.data<float>()[i];  // throws InternalError for any other dtype
  }
}

// -log(sigmoid(x)) if y == 1, -log(1 - sigmoid(x)) if y == 0, and the mix for soft targets:
// max(x, 0) - x*y + log(1 + exp(-|x|)). Never exponentiates a positive number, so it neither
// overflows for large |x| nor loses the tail (log1p) for confident predictions.
double binary_cross_entropy(double logit, double target) {
  // An infinite logit (an f32 output that overflowed) is certain: no loss where the target
  // agrees, infinite where it does not (the formula below gives inf - inf there).
  if (std::isinf(logit)) return (logit > 0 ? 1.0 - target : target) == 0.0 ? 0.0 : INFINITY;
  return std::max(logit, 0.0) - logit * target + std::log1p(std::exp(-std::abs(logit)));
}

std::string os_error(int error_number) {
  const char* hint = "";
  switch (error_number) {
    case ENOSPC: hint = "; the disk is full: free space or choose another job.run_dir"; break;
    case EDQUOT: hint = "; the disk quota is exhausted"; break;
    case EFBIG: hint = "; the file exceeds the size limit (ulimit -f)"; break;
    default: break;
  }
  return fmt::format("{} (errno {}){}", std::strerror(error_number), error_number, hint);
}

// Cuts a regular file of `size` bytes whose last byte is not a newline back to just after its
// last newline (or to nothing). Returns the number of bytes dropped.
std::uint64_t drop_torn_tail(int fd, const std::filesystem::path& path, off_t size) {
  if (size == 0) return 0;
  off_t keep = 0;
  char buffer[4096];
  for (off_t end = size; end > 0;) {
    const auto chunk = static_cast<std::size_t>(std::min<off_t>(end, sizeof buffer));
    const off_t begin = end - static_cast<off_t>(chunk);
    ssize_t got;
    do {
      got = ::pread(fd, buffer, chunk, begin);
    } while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(chunk)) {
      const int error_number = got < 0 ? errno : EIO;
      throw IoError(fmt::format("cannot read {} to check its last record: {}", path.string(),
                                os_error(error_number)));
    }
    const char* newline = static_cast<const char*>(::memrchr(buffer, '\n', chunk));
    if (newline != nullptr) {
      keep = begin + (newline - buffer) + 1;
      break;
    }
    end = begin;
  }
  if (keep == size) return 0;
  if (::ftruncate(fd, keep) != 0) {
    const int error_number = errno;
    throw IoError(fmt::format("cannot cut the torn last record off {}: {}", path.string(),
                              os_error(error_number)));
  }
  return static_cast<std::uint64_t>(size - keep);
}

}  // namespace

void MetricsLog::open(const std::filesystem::path& path, Writers writers) {
  if (fd_.valid()) close();
  // Read access too: the torn-tail check reads the end of the file.
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int error_number = errno;
    throw IoError(fmt::format("cannot open {} for the metrics: {}", path.string(),
                              os_error(error_number)));
  }
  io::FileDescriptor owned(fd);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error_number = errno;
    throw IoError(fmt::format("cannot stat {} for the metrics: {}", path.string(), os_error(error_number)));
  }
  // An open file's type never changes: whether a failed write can be cut back is known now.
  regular_ = S_ISREG(info.st_mode);
  // Beside other writers a line without its newline may be a record still being written.
  const bool repair = regular_ && writers == Writers::one;
  if (const std::uint64_t dropped = repair ? drop_torn_tail(fd, path, info.st_size) : 0; dropped > 0) {
    log::get("trainer")->warn("{}: dropped a torn last record ({} bytes without a newline) that "
                              "an earlier run left",
                              path.string(), dropped);
  }
  fd_ = std::move(owned);
  path_ = path;
  writers_ = writers;
}

// The size is read after the failure, not kept from before: appends go to the end of the file
// whatever its size, and the file may have been emptied or cut since the last record (a log
// rotation), so the end before this record is the size now less what this record put there.
bool MetricsLog::cut_back(std::size_t written) const {
  struct stat info {};
  if (!regular_ || ::fstat(fd_.get(), &info) != 0 || info.st_size < static_cast<off_t>(written)) return false;
  return ::ftruncate(fd_.get(), info.st_size - static_cast<off_t>(written)) == 0;
}

bool MetricsLog::ends_with_newline() const {
  struct stat info {};
  if (!regular_ || ::fstat(fd_.get(), &info) != 0 || info.st_size == 0) return true;
  char last = '\n';
  ssize_t got;
  do {
    got = ::pread(fd_.get(), &last, 1, info.st_size - 1);
  } while (got < 0 && errno == EINTR);
  return got != 1 || last == '\n';
}

void MetricsLog::append(std::string_view record) {
  AIACC_CHECK(fd_.valid(), "MetricsLog::append before open");
  AIACC_CHECK(record.find('\n') == std::string_view::npos,
              "a metrics record must be one line, got a newline in {}", record);
  std::string line;
  line.reserve(record.size() + 2);
  line.append(record).push_back('\n');
  if (writers_ == Writers::many) {
    append_beside_others(std::move(line));
  } else {
    append_as_only_writer(line);
  }
}

void MetricsLog::append_as_only_writer(const std::string& line) {
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t put = ::write(fd_.get(), line.data() + done, line.size() - done);
    if (put > 0) {
      done += static_cast<std::size_t>(put);
      continue;
    }
    if (put < 0 && errno == EINTR) continue;
    // A short write is followed by one that says why; 0 for a non-zero count means no room.
    const int error_number = put < 0 ? errno : ENOSPC;
    std::string kept = "; the file ends with the previous record";
    if (done > 0 && !cut_back(done)) {
      kept = fmt::format("; {} bytes of this record were written and could not be removed",
                         done);
    }
    throw IoError(fmt::format("cannot write the metrics to {}: {}{}", path_.string(),
                              os_error(error_number), kept));
  }
}

// One write(): the rest of a short one would land after whatever another appender wrote
// meanwhile, and its start cannot be cut back for the same reason. The bytes at the end of a
// line without its newline are left alone (a torn record, or another job's in the making).
void MetricsLog::append_beside_others(std::string line) {
  if (!ends_with_newline()) line.insert(line.begin(), '\n');
  ssize_t put;
  do {
    put = ::write(fd_.get(), line.data(), line.size());
  } while (put < 0 && errno == EINTR);
  if (put == static_cast<ssize_t>(line.size())) return;
  if (put < 0) {
    const int error_number = errno;
    throw IoError(fmt::format("cannot write the metrics to {}: {}", path_.string(), os_error(error_number)));
  }
  throw IoError(fmt::format("cannot write the metrics to {}: only {} of the record's {} bytes were written (a full "
                            "disk, a quota or the file size limit); they are left there, since another process "
                            "may be appending to the file",
                            path_.string(), put, line.size()));
}

void MetricsLog::close() { fd_.close(path_); }

void MetricMeter::add(double mean_loss, const Tensor& outputs, const Tensor& labels) {
  const std::int64_t n = labels.dim(0);
  AIACC_CHECK_EQ(outputs.dim(0), n, "outputs vs labels");
  loss_sum_ += mean_loss * static_cast<double>(n);
  examples_ += n;
  if (task_ == Task::classification) {
    correct_ += count_correct_classes(outputs, labels);
  } else {
    add_binary(outputs, labels);
  }
}

void MetricMeter::add_binary(const Tensor& outputs, const Tensor& labels) {
  const std::int64_t n = labels.dim(0);
  AIACC_CHECK_EQ(outputs.numel(), n, "binary outputs must hold one logit per example, got {}",
                 outputs.shape().str());
  // No reserve(size + n) here: an exact reserve per batch defeats the vector's geometric growth
  // and copies everything gathered so far on every call (quadratic over a log interval or an
  // evaluation pass; it was 1.4 MB of copying per training step on flights).
  for (std::int64_t i = 0; i < n; ++i) {
    const double logit = element(outputs, i);
    const double target = element(labels, i);
    const bool positive = target > 0.5;
    correct_ += (logit > 0) == positive;
    log_loss_sum_ += binary_cross_entropy(logit, target);
    saw_nan_score_ = saw_nan_score_ || std::isnan(logit);
    scores_.push_back(logit);
    positives_.push_back(positive ? 1 : 0);
  }
}

void MetricMeter::merge(const MetricMeter& other) {
  AIACC_CHECK(task_ == other.task_, "merging meters of different tasks");
  loss_sum_ += other.loss_sum_;
  correct_ += other.correct_;
  examples_ += other.examples_;
  log_loss_sum_ += other.log_loss_sum_;
  saw_nan_score_ = saw_nan_score_ || other.saw_nan_score_;
  scores_.insert(scores_.end(), other.scores_.begin(), other.scores_.end());
  positives_.insert(positives_.end(), other.positives_.begin(), other.positives_.end());
}

std::vector<std::byte> MetricMeter::to_bytes() const {
  // [loss_sum f64][log_loss_sum f64][correct i64][examples i64][nan u8 padded to 8][n i64]
  // [scores f64 x n][positives u8 x n]
  const std::int64_t n = static_cast<std::int64_t>(scores_.size());
  std::vector<std::byte> out(48 + scores_.size() * 9);
  std::byte* p = out.data();
  auto put = [&p](const void* value, std::size_t bytes) {
    std::memcpy(p, value, bytes);
    p += bytes;
  };
  const std::int64_t nan = saw_nan_score_ ? 1 : 0;
  put(&loss_sum_, 8);
  put(&log_loss_sum_, 8);
  put(&correct_, 8);
  put(&examples_, 8);
  put(&nan, 8);
  put(&n, 8);
  put(scores_.data(), scores_.size() * 8);
  put(positives_.data(), positives_.size());
  return out;
}

MetricMeter MetricMeter::from_bytes(Task task, std::span<const std::byte> bytes) {
  MetricMeter m(task);
  AIACC_CHECK(bytes.size() >= 48, "metric meter message of {} bytes", bytes.size());
  const std::byte* p = bytes.data();
  auto get = [&p](void* value, std::size_t n) {
    std::memcpy(value, p, n);
    p += n;
  };
  std::int64_t nan = 0, n = 0;
  get(&m.loss_sum_, 8);
  get(&m.log_loss_sum_, 8);
  get(&m.correct_, 8);
  get(&m.examples_, 8);
  get(&nan, 8);
  get(&n, 8);
  AIACC_CHECK(n >= 0 && bytes.size() == 48 + static_cast<std::size_t>(n) * 9,
              "metric meter message of {} bytes for {} scores", bytes.size(), n);
  m.saw_nan_score_ = nan != 0;
  m.scores_.resize(static_cast<std::size_t>(n));
  m.positives_.resize(static_cast<std::size_t>(n));
  get(m.scores_.data(), m.scores_.size() * 8);
  get(m.positives_.data(), m.positives_.size());
  return m;
}

double MetricMeter::auc() const {
  constexpr double kUndefined = std::numeric_limits<double>::quiet_NaN();
  if (task_ != Task::binary || saw_nan_score_) return kUndefined;
  return util::exact_auc(scores_, positives_).value_or(kUndefined);  // undefined for one class
}

double MetricMeter::log_loss() const {
  if (task_ != Task::binary || examples_ == 0) return std::numeric_limits<double>::quiet_NaN();
  return log_loss_sum_ / static_cast<double>(examples_);
}

}  // namespace aiacc::trainer
