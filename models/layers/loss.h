// Loss functions as models use them: softmax cross-entropy for classification and binary
// cross-entropy with logits for CTR. Not Layers (they take labels); each forward() returns
// the mean loss over the batch and backward() returns dL/dlogits of that mean.
// Legend: N = batch, C = classes.
#pragma once

#include "core/tensor.h"

namespace aiacc::models {

class SoftmaxCrossEntropy {
 public:
  // label_smoothing in [0, 1]: the target puts 1 - s on the label and s/C on every class.
  explicit SoftmaxCrossEntropy(double label_smoothing = 0.0);

  // logits [N, C] (f32 or f64), labels [N] i64 class ids -> mean loss. Throws DataError naming
  // the example and value for a label outside [0, C), InternalError on a shape mismatch.
  double forward(const Tensor& logits, const Tensor& labels);
  // dL/dlogits [N, C], same dtype as the logits, of the last forward's mean loss.
  Tensor backward();

 private:
  double label_smoothing_;
  Tensor dlogits_;
};

class BinaryCrossEntropyWithLogits {
 public:
  // logits [N] or [N, 1] (f32 or f64); targets with N elements, f32 or f64, each in [0, 1]
  // (converted to the logits' dtype) -> mean loss. Throws DataError naming the example and
  // value for a target outside [0, 1], InternalError on a shape mismatch.
  double forward(const Tensor& logits, const Tensor& targets);
  // dL/dlogits, the logits' shape and dtype, of the last forward's mean loss.
  Tensor backward();

 private:
  Tensor dlogits_;
};

}  // namespace aiacc::models
