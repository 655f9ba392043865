// `cifar`: CIFAR-10 binary batch files (each record: 1 label byte, then 3072 bytes of a 32x32
// RGB image stored as three 1024-byte planes, R then G then B), gzip'd or plain.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/detail/u8_images.h"

namespace aiacc::data {

class Cifar final : public detail::U8ImageDataset {
 public:
  static constexpr std::int64_t kChannels = 3, kHeight = 32, kWidth = 32;
  static constexpr std::int64_t kRecordBytes = 1 + kChannels * kHeight * kWidth;  // 3073

  struct Options {
    std::string directory = "cifar-10-batches-bin";
    std::vector<std::string> train_files = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                            "data_batch_4.bin", "data_batch_5.bin"};
    std::vector<std::string> test_files = {"test_batch.bin"};
    // CIFAR-10 train-set statistics of pixel/255 per channel (R, G, B).
    std::vector<double> normalize_mean = {0.4914, 0.4822, 0.4465};
    std::vector<double> normalize_std = {0.2470, 0.2435, 0.2616};
    std::int64_t num_classes = 10;
    std::int64_t limit = 0;

    // Defined before visit(): clang does not allow a deduced return type to be used earlier.
    static auto three_values() {
      return [](const std::vector<double>& v) {
        return v.size() == 3 ? std::string() : std::string("expected 3 values, one per channel");
      };
    }
    static auto three_positive_values() {
      return [](const std::vector<double>& v) {
        if (v.size() != 3) return std::string("expected 3 values, one per channel");
        for (double x : v) if (!(x > 0)) return std::string("expected values > 0");
        return std::string();
      };
    }
    template <class V>
    void visit(V& v) {
      v.field("directory", directory, "folder of the batch files (file names below are relative to it)");
      v.field("train_files", train_files, "record files of the train split, read in order", config::non_empty());
      v.field("test_files", test_files, "record files of the test split", config::non_empty());
      v.field("normalize_mean", normalize_mean, "per-channel mean of pixel/255 (R, G, B)", three_values());
      v.field("normalize_std", normalize_std, "per-channel std of pixel/255 (R, G, B), each > 0",
              three_positive_values());
      v.field("num_classes", num_classes, "labels must lie in [0, num_classes)",
              config::in_range<std::int64_t>(1, 256));
      v.field("limit", limit, "use only the first N examples (0: all); for quick runs",
              config::at_least<std::int64_t>(0));
    }
  };

  // Reads and validates every file of `context.split` into memory, up to `limit` examples.
  // Throws DataError naming the file and record, ConfigError for an unknown split or a file it
  // opens that is missing, empty or not a regular file (check_input_files).
  Cifar(const Options& options, const DatasetContext& context);

  // The split's files that are surely read: all of them, or with a limit only the first (the
  // limit may be reached before the others, which then need not exist).
  static std::vector<InputFile> input_files(const Options& options, const DatasetContext& context);

};

}  // namespace aiacc::data
