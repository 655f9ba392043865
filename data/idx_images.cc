// IDX reading: big-endian header (magic 00 00 08 NDIMS, one uint32 per dimension), then
// row-major uint8 data. Every inconsistency is a DataError naming the file.
#include "data/idx_images.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "data/detail/file_bytes.h"

namespace aiacc::data {
namespace {

constexpr const char* kInstallHint = "install Fashion-MNIST with `apt-get install dataset-fashion-mnist`";

// An IDX file's dimensions and where its data starts.
struct IdxFile {
  std::vector<std::uint8_t> bytes;
  std::vector<std::int64_t> dims;
  std::size_t data_offset = 0;
};

IdxFile read_idx(const std::string& path, std::uint8_t expected_ndims) {
  IdxFile file;
  file.bytes = detail::read_file_bytes(path, kInstallHint);
  const auto& bytes = file.bytes;
  const std::uint32_t expected_magic = 0x00000800u | expected_ndims;
  if (bytes.empty()) throw DataError(fmt::format("{}: empty file, expected an IDX header", path));
  if (bytes.size() < 4) {
    throw DataError(fmt::format("{}: truncated: {} bytes, too short for an IDX header", path, bytes.size()));
  }
  const std::uint32_t magic = detail::load_be32(bytes.data());
  if (magic != expected_magic) {
    throw DataError(fmt::format("{}: bad magic number 0x{:08x}, expected 0x{:08x} (uint8 IDX with {} "
                                "dimension{})", path, magic, expected_magic, expected_ndims,
                                expected_ndims == 1 ? "" : "s"));
  }
  file.data_offset = 4 + 4 * std::size_t{expected_ndims};
  if (bytes.size() < file.data_offset) {
    throw DataError(fmt::format("{}: truncated: the header needs {} bytes, file holds {}", path,
                                file.data_offset, bytes.size()));
  }
  std::uint64_t promised = 1;
  std::uint64_t nonzero = 1;  // product of the non-zero dimensions
  bool overflow = false;
  std::string dims_text;
  for (std::uint8_t d = 0; d < expected_ndims; ++d) {
    const std::uint32_t dim = detail::load_be32(bytes.data() + 4 + 4 * d);
    file.dims.push_back(dim);
    promised *= dim;
    // Three factors below 2^32 can exceed 2^64 and wrap to a size that matches the file (e.g.
    // 4 x 2^31 x 2^31 promises "0" bytes): refuse any product beyond int64, which the image
    // sizes computed from these dimensions use, zero dimensions included.
    if (dim != 0 && nonzero > static_cast<std::uint64_t>(INT64_MAX) / dim) overflow = true;
    if (dim != 0) nonzero *= dim;
    dims_text += fmt::format("{}{}", d ? "x" : "", dim);
  }
  if (overflow) {
    throw DataError(fmt::format("{}: header dimensions {} describe more than 2^63 bytes (corrupt header?)",
                                path, dims_text));
  }
  const std::uint64_t held = bytes.size() - file.data_offset;
  if (held < promised) {
    throw DataError(fmt::format("{}: truncated: header promises {} = {} bytes of data, file holds {}",
                                path, dims_text, promised, held));
  }
  if (held > promised) {
    throw DataError(fmt::format("{}: {} unexpected bytes after the data (header promises {} = {} bytes)",
                                path, held - promised, dims_text, promised));
  }
  return file;
}

detail::U8Images load(const IdxImages::Options& options, const DatasetContext& context) {
  const std::vector<InputFile> files = IdxImages::input_files(options, context);
  check_input_files(files);
  const std::string& images_path = files[0].path;
  const std::string& labels_path = files[1].path;

  IdxFile images = read_idx(images_path, 3);
  IdxFile labels = read_idx(labels_path, 1);
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(fmt::format("{} holds {} images but {} holds {} labels", images_path, images.dims[0],
                                labels_path, labels.dims[0]));
  }
  detail::U8Images out;
  out.count = images.dims[0];
  if (options.limit > 0) out.count = std::min(out.count, options.limit);
  out.channels = 1;
  out.height = images.dims[1];
  out.width = images.dims[2];
  const auto* label_data = labels.bytes.data() + labels.data_offset;
  for (std::int64_t i = 0; i < out.count; ++i) {
    if (label_data[i] >= options.num_classes) {
      throw DataError(fmt::format("{}: label {} of example {} is not below num_classes {}", labels_path,
                                  label_data[i], i, options.num_classes));
    }
  }
  out.labels.assign(label_data, label_data + out.count);
  // Keep only the pixels: the decoded file buffer is dropped after the copy.
  const auto* pixel_data = images.bytes.data() + images.data_offset;
  out.pixels.assign(pixel_data, pixel_data + out.count * out.example_bytes());
  return out;
}

}  // namespace

std::vector<InputFile> IdxImages::input_files(const Options& options, const DatasetContext& context) {
  check_split(context, "idx_images");
  const bool train = context.split == "train";
  const auto file = [&](const char* field, const std::string& name) {
    return InputFile{fmt::format("data.{}.idx_images.{}", context.split, field),
                     detail::join_path(options.directory, name), kInstallHint};
  };
  return {train ? file("train_images", options.train_images) : file("test_images", options.test_images),
          train ? file("train_labels", options.train_labels) : file("test_labels", options.test_labels)};
}

IdxImages::IdxImages(const Options& options, const DatasetContext& context)
    : U8ImageDataset(detail::U8ImageReader(load(options, context), options.num_classes, {options.normalize_mean}, {options.normalize_std})) {}

AIACC_REGISTER_DATASET("idx_images", IdxImages);

}  // namespace aiacc::data
