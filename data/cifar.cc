// CIFAR-10 binary reading: fixed 3073-byte records, so a file whose size is not a multiple of
// the record size is truncated (or not a CIFAR file), and the record number locates bad labels.
#include "data/cifar.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "data/detail/file_bytes.h"

namespace aiacc::data {
namespace {

// Every file of the split, with its key.
std::vector<InputFile> split_files(const Cifar::Options& options, const DatasetContext& context) {
  check_split(context, "cifar");
  const bool train = context.split == "train";
  const auto& names = train ? options.train_files : options.test_files;
  std::vector<InputFile> files;
  for (std::size_t i = 0; i < names.size(); ++i) {
    files.push_back({fmt::format("data.{}.cifar.{}[{}]", context.split, train ? "train_files" : "test_files", i),
                     detail::join_path(options.directory, names[i]), ""});
  }
  return files;
}

detail::U8Images load(const Cifar::Options& options, const DatasetContext& context) {
  detail::U8Images out;
  out.channels = Cifar::kChannels;
  out.height = Cifar::kHeight;
  out.width = Cifar::kWidth;
  const std::int64_t image_bytes = out.example_bytes();
  for (const InputFile& file : split_files(options, context)) {
    if (options.limit > 0 && out.count >= options.limit) break;
    check_input_files({file});
    const std::string& path = file.path;
    std::vector<std::uint8_t> bytes = detail::read_file_bytes(path);
    const auto size = static_cast<std::int64_t>(bytes.size());
    if (size == 0) throw DataError(fmt::format("{}: empty file, expected {}-byte records", path, Cifar::kRecordBytes));
    if (size % Cifar::kRecordBytes != 0) {
      throw DataError(fmt::format("{}: {} bytes is not a whole number of {}-byte CIFAR-10 records (record {} is "
                                  "incomplete): truncated, or not a CIFAR-10 binary file (CIFAR-100's records "
                                  "are 3074 bytes)",
                                  path, size, Cifar::kRecordBytes, size / Cifar::kRecordBytes));
    }
    std::int64_t records = size / Cifar::kRecordBytes;
    if (options.limit > 0) records = std::min(records, options.limit - out.count);
    out.pixels.reserve(out.pixels.size() + static_cast<std::size_t>(records * image_bytes));
    for (std::int64_t r = 0; r < records; ++r) {
      const std::uint8_t* record = bytes.data() + r * Cifar::kRecordBytes;
      if (record[0] >= options.num_classes) {
        throw DataError(fmt::format("{}: record {}: label {} is not below num_classes {}", path, r,
                                    record[0], options.num_classes));
      }
      out.labels.push_back(record[0]);
      // The record's planes are already [C, H, W] row-major.
      out.pixels.insert(out.pixels.end(), record + 1, record + 1 + image_bytes);
    }
    out.count += records;
  }
  return out;
}

}  // namespace

std::vector<InputFile> Cifar::input_files(const Options& options, const DatasetContext& context) {
  std::vector<InputFile> files = split_files(options, context);
  if (options.limit > 0 && files.size() > 1) files.resize(1);
  return files;
}

Cifar::Cifar(const Options& options, const DatasetContext& context)
    : U8ImageDataset(detail::U8ImageReader(load(options, context), options.num_classes, options.normalize_mean, options.normalize_std)) {}

AIACC_REGISTER_DATASET("cifar", Cifar);

}  // namespace aiacc::data
