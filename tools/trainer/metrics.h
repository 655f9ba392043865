// Running metrics over a stream of batches: mean loss and, for classification, accuracy.
// (AUC and log loss for CTR arrive with the Wide&Deep work.)
#pragma once

#include <cstdint>

#include "core/batch.h"
#include "core/tensor.h"

namespace aiacc::trainer {

class MetricMeter {
 public:
  explicit MetricMeter(Task task) : task_(task) {}
  // Adds one batch: its mean loss, the model's outputs and the labels.
  void add(double mean_loss, const Tensor& outputs, const Tensor& labels);
  void reset() { *this = MetricMeter(task_); }
  double mean_loss() const { return examples_ ? loss_sum_ / static_cast<double>(examples_) : 0.0; }
  double accuracy() const { return examples_ ? static_cast<double>(correct_) / static_cast<double>(examples_) : 0.0; }
  std::int64_t examples() const { return examples_; }
  Task task() const { return task_; }

 private:
  Task task_;
  double loss_sum_ = 0;
  std::int64_t correct_ = 0;
  std::int64_t examples_ = 0;
};

}  // namespace aiacc::trainer
