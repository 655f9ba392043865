#include "models/layers/sequential.h"

#include "models/layers/activation.h"
#include "models/layers/batch_norm.h"

namespace aiacc::models {

void Sequential::to(Device device, const ActivationFormat& format) {
  for (auto& layer : layers_) layer->to(device, format);
  for (std::size_t i = 0; i + 1 < layers_.size(); ++i) {
    auto* norm = dynamic_cast<BatchNorm*>(layers_[i].get());
    auto* relu = dynamic_cast<ReLU*>(layers_[i + 1].get());
    if (norm == nullptr || relu == nullptr) continue;
    norm->set_fused_relu(!device.is_cpu());
    relu->set_passthrough(!device.is_cpu());
  }
}

Tensor Sequential::forward(const Tensor& input, bool training) {
  Tensor x = input;
  for (auto& layer : layers_) x = layer->forward(x, training);
  return x;
}

Tensor Sequential::backward(const Tensor& grad_output, bool need_input_grad) {
  Tensor grad = grad_output;
  for (std::size_t i = layers_.size(); i-- > 0;) {
    grad = layers_[i]->backward(grad, i > 0 || need_input_grad);
  }
  return grad;
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> all;
  for (auto& layer : layers_) {
    for (Parameter* p : layer->parameters()) all.push_back(p);
  }
  return all;
}

std::vector<std::pair<std::string, Tensor>> Sequential::buffers() {
  std::vector<std::pair<std::string, Tensor>> all;
  for (auto& layer : layers_) {
    for (auto& named : layer->buffers()) all.push_back(std::move(named));
  }
  return all;
}

}  // namespace aiacc::models
