// In-memory uint8 images with labels, converted per batch to normalised float. Shared by the
// file-backed image datasets (IDX, CIFAR). Internal to data/.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/batch.h"
#include "data/dataset.h"

namespace aiacc::data::detail {

// N = count, C = channels, H = height, W = width; pixels are [N, C, H, W] row-major.
struct U8Images {
  std::int64_t count = 0;
  std::int64_t channels = 0, height = 0, width = 0;
  std::vector<std::uint8_t> pixels;
  std::vector<std::uint8_t> labels;  // [N]

  std::int64_t example_bytes() const { return channels * height * width; }
};

// Per-channel affine map of pixel/255 to (pixel/255 - mean[c]) / std[c].
class U8ImageReader {
 public:
  // `mean` and `std` hold one value per channel (std > 0); `num_classes` goes into the spec.
  U8ImageReader(U8Images images, std::int64_t num_classes, const std::vector<double>& mean,
                const std::vector<double>& std);

  InputSpec spec() const;
  std::int64_t size() const { return images_.count; }

  // Fills inputs [n, C, H, W] f32 and labels [n] i64. InternalError for an index out of
  // range. Thread-safe (reads immutable state).
  void read(std::span<const std::int64_t> indices, Batch& batch) const;

 private:
  U8Images images_;
  std::int64_t num_classes_;
  std::vector<float> scale_, shift_;  // per channel: value = pixel * scale + shift
};

// A dataset served entirely from a U8ImageReader (IDX, CIFAR): the readers differ only in how
// they load files, so spec/size/read live here once.
class U8ImageDataset : public Dataset {
 public:
  explicit U8ImageDataset(U8ImageReader reader) : reader_(std::move(reader)) {}
  InputSpec spec() const override { return reader_.spec(); }
  std::int64_t size() const override { return reader_.size(); }
  // Thread-safe (immutable after construction).
  void read(std::span<const std::int64_t> indices, Batch& batch) override { reader_.read(indices, batch); }

 private:
  U8ImageReader reader_;
};

}  // namespace aiacc::data::detail
