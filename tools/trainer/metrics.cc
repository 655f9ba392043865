#include "tools/trainer/metrics.h"

#include "core/check.h"

namespace aiacc::trainer {

namespace {

template <class T>
std::int64_t count_correct(const Tensor& outputs, const Tensor& labels, Task task) {
  const std::int64_t n = labels.dim(0);
  const T* out = outputs.data<T>();
  std::int64_t correct = 0;
  if (task == Task::classification) {
    const std::int64_t classes = outputs.dim(1);
    const std::int64_t* label = labels.data<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t best = 0;
      for (std::int64_t c = 1; c < classes; ++c) {
        if (out[i * classes + c] > out[i * classes + best]) best = c;
      }
      correct += best == label[i];
    }
  } else {
    // Binary: logit > 0 predicts 1. Labels may be f32 or f64 0/1.
    for (std::int64_t i = 0; i < n; ++i) {
      double target = labels.dtype() == DType::f64 ? labels.data<double>()[i] : labels.data<float>()[i];
      correct += (out[i] > 0) == (target > 0.5);
    }
  }
  return correct;
}

}  // namespace

void MetricMeter::add(double mean_loss, const Tensor& outputs, const Tensor& labels) {
  const std::int64_t n = labels.dim(0);
  AIACC_CHECK_EQ(outputs.dim(0), n, "outputs vs labels");
  loss_sum_ += mean_loss * static_cast<double>(n);
  examples_ += n;
  correct_ += outputs.dtype() == DType::f64 ? count_correct<double>(outputs, labels, task_)
                                            : count_correct<float>(outputs, labels, task_);
}

}  // namespace aiacc::trainer
