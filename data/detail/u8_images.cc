// Conversion of stored uint8 images to normalised float batches.
#include "data/detail/u8_images.h"

#include "core/check.h"

namespace aiacc::data::detail {

U8ImageReader::U8ImageReader(U8Images images, std::int64_t num_classes,
                             const std::vector<double>& mean, const std::vector<double>& std)
    : images_(std::move(images)), num_classes_(num_classes) {
  AIACC_CHECK_EQ(static_cast<std::int64_t>(mean.size()), images_.channels, "means per channel");
  AIACC_CHECK_EQ(static_cast<std::int64_t>(std.size()), images_.channels, "stds per channel");
  for (std::size_t c = 0; c < mean.size(); ++c) {
    AIACC_CHECK_GT(std[c], 0.0, "std of channel {}", c);
    // (p/255 - mean)/std computed in double once, applied as one fused multiply-add per pixel.
    scale_.push_back(static_cast<float>(1.0 / (255.0 * std[c])));
    shift_.push_back(static_cast<float>(-mean[c] / std[c]));
  }
}

InputSpec U8ImageReader::spec() const {
  InputSpec spec;
  spec.task = Task::classification;
  spec.example_shape = Shape{images_.channels, images_.height, images_.width};
  spec.num_classes = num_classes_;
  return spec;
}

void U8ImageReader::read(std::span<const std::int64_t> indices, Batch& batch) const {
  const auto n = static_cast<std::int64_t>(indices.size());
  const std::int64_t plane = images_.height * images_.width;
  batch.inputs = Tensor::empty(Shape{n, images_.channels, images_.height, images_.width});
  batch.labels = Tensor::empty(Shape{n}, DType::i64);
  batch.sparse.clear();
  float* out = batch.inputs.data<float>();
  std::int64_t* labels = batch.labels.data<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t index = indices[static_cast<std::size_t>(i)];
    AIACC_CHECK(index >= 0 && index < images_.count, "example index {} of {}", index, images_.count);
    const std::uint8_t* in = images_.pixels.data() + index * images_.example_bytes();
    for (std::int64_t c = 0; c < images_.channels; ++c) {
      const float scale = scale_[static_cast<std::size_t>(c)];
      const float shift = shift_[static_cast<std::size_t>(c)];
      for (std::int64_t p = 0; p < plane; ++p) *out++ = static_cast<float>(*in++) * scale + shift;
    }
    labels[i] = images_.labels[static_cast<std::size_t>(index)];
  }
}

}  // namespace aiacc::data::detail
