// Loss wrappers: shape and dtype checks around core/kernels/losses. The gradient is computed
// in the same pass as the loss (it needs the same softmax/sigmoid) and handed out by backward().
#include "models/layers/loss.h"

#include "core/check.h"
#include "core/device_ops.h"
#include "core/kernels/losses.h"

namespace aiacc::models {

SoftmaxCrossEntropy::SoftmaxCrossEntropy(double label_smoothing)
    : label_smoothing_(label_smoothing) {
  AIACC_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
              "softmax cross-entropy: label smoothing {} outside [0, 1]", label_smoothing);
}

double SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels) {
  AIACC_CHECK(logits.rank() == 2 && logits.dim(0) >= 1 && logits.dim(1) >= 1,
              "softmax cross-entropy: logits {} are not [N, C]", logits.shape().str());
  AIACC_CHECK(labels.dtype() == DType::i64 && labels.shape() == Shape({logits.dim(0)}),
              "softmax cross-entropy: labels {} {} for logits {} (expected i64 [N])",
              dtype_name(labels.dtype()), labels.shape().str(), logits.shape().str());
  const std::int64_t batch = logits.dim(0), classes = logits.dim(1);
  AIACC_CHECK(logits.dtype() == DType::f32 || logits.dtype() == DType::f64,
              "softmax cross-entropy: logits dtype {} (f32 or f64)", dtype_name(logits.dtype()));
  // Assigned only after the kernel succeeds, so a rejected batch leaves no stale gradient.
  dlogits_ = Tensor();
  Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  if (!logits.device().is_cpu()) {
    AIACC_CHECK(logits.dtype() == DType::f32 && labels.device() == logits.device(),
                "softmax cross-entropy: logits {} on {} and labels on {} (need f32 and both on "
                "the device)", dtype_name(logits.dtype()), logits.device().str(), labels.device().str());
    const double loss = device_ops(logits.device())
                            .softmax_cross_entropy(logits.device(), batch, classes, logits.data<float>(),
                                                   labels.data<std::int64_t>(), label_smoothing_,
                                                   dlogits.data<float>());
    dlogits_ = dlogits;
    return loss;
  }
  const double loss = logits.dtype() == DType::f64
                          ? kernels::softmax_cross_entropy<double>(
                                batch, classes, logits.data<double>(), labels.data<std::int64_t>(),
                                label_smoothing_, dlogits.data<double>())
                          : kernels::softmax_cross_entropy<float>(
                                batch, classes, logits.data<float>(), labels.data<std::int64_t>(),
                                label_smoothing_, dlogits.data<float>());
  dlogits_ = dlogits;
  return loss;
}

Tensor SoftmaxCrossEntropy::backward() {
  AIACC_CHECK(dlogits_.defined(), "softmax cross-entropy: backward() without a forward()");
  return dlogits_;
}

double BinaryCrossEntropyWithLogits::forward(const Tensor& logits, const Tensor& targets) {
  const bool column = logits.rank() == 2 && logits.dim(1) == 1;
  AIACC_CHECK((logits.rank() == 1 || column) && logits.dim(0) >= 1,
              "binary cross-entropy: logits {} are not [N] or [N, 1]", logits.shape().str());
  const std::int64_t batch = logits.dim(0);
  AIACC_CHECK(targets.numel() == batch && targets.rank() >= 1 && targets.dim(0) == batch &&
                  (targets.dtype() == DType::f32 || targets.dtype() == DType::f64),
              "binary cross-entropy: targets {} {} for logits {} (expected f32/f64 [N])",
              dtype_name(targets.dtype()), targets.shape().str(), logits.shape().str());
  AIACC_CHECK(logits.dtype() == DType::f32 || logits.dtype() == DType::f64,
              "binary cross-entropy: logits dtype {} (f32 or f64)", dtype_name(logits.dtype()));
  AIACC_CHECK(logits.device().is_cpu() && targets.device().is_cpu(),
              "binary cross-entropy: logits on {}, targets on {} (it runs on the CPU only)",
              logits.device().str(), targets.device().str());
  const Tensor t = targets.dtype() == logits.dtype() ? targets : targets.to(logits.dtype());
  // Assigned only after the kernel succeeds, so a rejected batch leaves no stale gradient.
  dlogits_ = Tensor();
  Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype());
  const double loss =
      logits.dtype() == DType::f64
          ? kernels::binary_cross_entropy_with_logits<double>(
                batch, logits.data<double>(), t.data<double>(), dlogits.data<double>())
          : kernels::binary_cross_entropy_with_logits<float>(
                batch, logits.data<float>(), t.data<float>(), dlogits.data<float>());
  dlogits_ = dlogits;
  return loss;
}

Tensor BinaryCrossEntropyWithLogits::backward() {
  AIACC_CHECK(dlogits_.defined(), "binary cross-entropy: backward() without a forward()");
  return dlogits_;
}

}  // namespace aiacc::models
