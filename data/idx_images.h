// `idx_images`: uint8 images and labels in IDX files (MNIST, Fashion-MNIST), gzip'd or plain.
// By default the Fashion-MNIST files of Debian's dataset-fashion-mnist package.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/detail/u8_images.h"

namespace aiacc::data {

class IdxImages final : public detail::U8ImageDataset {
 public:
  struct Options {
    std::string directory = "/usr/share/datasets/fashion-mnist";
    std::string train_images = "train-images-idx3-ubyte.gz";
    std::string train_labels = "train-labels-idx1-ubyte.gz";
    std::string test_images = "t10k-images-idx3-ubyte.gz";
    std::string test_labels = "t10k-labels-idx1-ubyte.gz";
    double normalize_mean = 0.2860;  // Fashion-MNIST train mean of pixel/255
    double normalize_std = 0.3530;   // Fashion-MNIST train std of pixel/255
    std::int64_t num_classes = 10;
    std::int64_t limit = 0;

    template <class V>
    void visit(V& v) {
      v.field("directory", directory, "folder of the IDX files (file names below are relative to it)");
      v.field("train_images", train_images, "images of the train split (IDX, 0x00000803)", config::non_empty());
      v.field("train_labels", train_labels, "labels of the train split (IDX, 0x00000801)", config::non_empty());
      v.field("test_images", test_images, "images of the test split", config::non_empty());
      v.field("test_labels", test_labels, "labels of the test split", config::non_empty());
      v.field("normalize_mean", normalize_mean, "mean of pixel/255 subtracted from every pixel",
              config::in_range(-1.0, 2.0));
      v.field("normalize_std", normalize_std, "std of pixel/255 each pixel is divided by",
              config::greater_than(0.0));
      v.field("num_classes", num_classes, "labels must lie in [0, num_classes)",
              config::in_range<std::int64_t>(1, 256));
      v.field("limit", limit, "use only the first N examples (0: all); for quick runs",
              config::at_least<std::int64_t>(0));
    }
  };

  // Reads and validates both files of `context.split` into memory. Throws DataError naming the
  // file and the problem, ConfigError for an unknown split or a file that is missing, empty or
  // not a regular file (check_input_files).
  IdxImages(const Options& options, const DatasetContext& context);

  // The split's images and labels files (in `directory`); ConfigError for an unknown split.
  static std::vector<InputFile> input_files(const Options& options, const DatasetContext& context);

};

}  // namespace aiacc::data
