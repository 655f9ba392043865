// ResidualBlock: runs both paths, joins them with a fused add + ReLU, and sums the input
// gradients of both paths in backward.
#include "models/layers/residual_block.h"

#include "core/check.h"
#include "core/device_ops.h"
#include "core/kernels/activation.h"
#include "core/kernels/elementwise.h"

namespace aiacc::models {

ResidualBlock::ResidualBlock(std::string name, std::unique_ptr<Sequential> main,
                             std::unique_ptr<Sequential> shortcut)
    : name_(std::move(name)), main_(std::move(main)), shortcut_(std::move(shortcut)) {
  AIACC_CHECK(main_ != nullptr, "{}: residual block without a main path", name_);
}

std::vector<Parameter*> ResidualBlock::parameters() {
  std::vector<Parameter*> all = main_->parameters();
  if (shortcut_) {
    for (Parameter* p : shortcut_->parameters()) all.push_back(p);
  }
  return all;
}

std::vector<std::pair<std::string, Tensor>> ResidualBlock::buffers() {
  auto all = main_->buffers();
  if (shortcut_) {
    for (auto& named : shortcut_->buffers()) all.push_back(std::move(named));
  }
  return all;
}

Tensor ResidualBlock::forward(const Tensor& input, bool training) {
  const Tensor main_out = main_->forward(input, training);
  const Tensor skip = shortcut_ ? shortcut_->forward(input, training) : input;
  AIACC_CHECK(main_out.shape() == skip.shape() && main_out.dtype() == skip.dtype(),
              "{}: main path gives {} {} but the shortcut gives {} {}", name_,
              main_out.shape().str(), dtype_name(main_out.dtype()), skip.shape().str(),
              dtype_name(skip.dtype()));
  output_ = Tensor::empty(main_out.shape(), main_out.dtype(), main_out.device());
  if (!main_out.device().is_cpu()) {
    AIACC_CHECK(skip.device() == main_out.device(), "{}: main path on {}, shortcut on {}", name_,
                main_out.device().str(), skip.device().str());
    device_ops(main_out.device())
        .add_relu(main_out.device(), main_out.dtype(), main_out.numel(), main_out.raw_data(), skip.raw_data(),
                  output_.raw_data());
  } else if (main_out.dtype() == DType::f64) {
    kernels::add_relu_forward<double>(main_out.numel(), main_out.data<double>(),
                                      skip.data<double>(), output_.data<double>());
  } else {
    kernels::add_relu_forward<float>(main_out.numel(), main_out.data<float>(), skip.data<float>(),
                                     output_.data<float>());
  }
  return output_;
}

Tensor ResidualBlock::backward(const Tensor& grad_output, bool need_input_grad) {
  AIACC_CHECK(output_.defined(), "{}: backward() without a forward()", name_);
  AIACC_CHECK(grad_output.shape() == output_.shape() && grad_output.dtype() == output_.dtype(),
              "{}: expected grad_output {} {}, got {} {}", name_, output_.shape().str(),
              dtype_name(output_.dtype()), grad_output.shape().str(),
              dtype_name(grad_output.dtype()));
  const bool f64 = output_.dtype() == DType::f64;
  // dL/d(main + shortcut): the join's ReLU mask applied once, shared by both paths.
  const Device device = output_.device();
  Tensor grad_sum = Tensor::empty(output_.shape(), output_.dtype(), device);
  if (!device.is_cpu()) {
    AIACC_CHECK(grad_output.device() == device, "{}: grad_output on {}, the output on {}", name_,
                grad_output.device().str(), device.str());
    device_ops(device).relu_backward(device, output_.dtype(), output_.numel(), output_.raw_data(),
                                     grad_output.raw_data(), grad_sum.raw_data());
  } else if (f64) {
    kernels::relu_backward<double>(output_.numel(), output_.data<double>(),
                                   grad_output.data<double>(), grad_sum.data<double>());
  } else {
    kernels::relu_backward<float>(output_.numel(), output_.data<float>(),
                                  grad_output.data<float>(), grad_sum.data<float>());
  }
  // The shortcut holds the block's last parameters in forward order, so it goes first.
  Tensor grad_skip;
  if (shortcut_) {
    grad_skip = shortcut_->backward(grad_sum, need_input_grad);
  } else if (need_input_grad) {
    grad_skip = grad_sum;  // identity: the shortcut passes the gradient through
  }
  Tensor grad_main = main_->backward(grad_sum, need_input_grad);
  if (!need_input_grad) return {};
  AIACC_CHECK(grad_main.shape() == grad_skip.shape(),
              "{}: input gradients of the paths disagree: {} vs {}", name_,
              grad_main.shape().str(), grad_skip.shape().str());
  // A new tensor rather than summing into grad_main: a path of view layers (Flatten) could
  // hand back the caller's grad_output itself.
  Tensor grad_input = Tensor::empty(grad_main.shape(), grad_main.dtype(), device);
  if (!device.is_cpu()) {
    device_ops(device).add(device, grad_main.dtype(), grad_main.numel(), grad_main.raw_data(),
                           grad_skip.raw_data(), grad_input.raw_data());
  } else if (f64) {
    kernels::add<double>(grad_main.numel(), grad_main.data<double>(), grad_skip.data<double>(),
                         grad_input.data<double>());
  } else {
    kernels::add<float>(grad_main.numel(), grad_main.data<float>(), grad_skip.data<float>(),
                        grad_input.data<float>());
  }
  return grad_input;
}

}  // namespace aiacc::models
