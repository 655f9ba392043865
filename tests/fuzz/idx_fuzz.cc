// Fuzz target: the IDX image reader (data/idx_images.h: images and labels files, plain or gzip),
// then a batch read of every example it accepted.
//
// Input: [u8 flags][u16 images length][images file][labels file].
//   flags bit 0: gzip the images file; bit 1: gzip the labels file; bit 2: the test split;
//   bits 3-7: limit (0: all). The files may also be gzip streams themselves (seeds hold some),
//   which reaches the corrupt and truncated gzip paths.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/batch.h"
#include "data/idx_images.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace aiacc;
  fuzz::quiet_logs();
  fuzz::InputCursor input(data, size);
  const std::uint8_t flags = input.u8();
  const std::string images(input.bytes(input.u16()));
  const std::string labels(input.rest());

  data::IdxImages::Options options;
  options.directory = fuzz::ScratchDir::get().string();
  const bool test = (flags & 4) != 0;
  std::string& images_name = test ? options.test_images : options.train_images;
  std::string& labels_name = test ? options.test_labels : options.train_labels;
  images_name = (flags & 1) ? "images.gz" : "images";
  labels_name = (flags & 2) ? "labels.gz" : "labels";
  options.limit = flags >> 3;
  fuzz::write_file(fuzz::scratch_path(images_name), (flags & 1) ? fuzz::gzip(images) : images);
  fuzz::write_file(fuzz::scratch_path(labels_name), (flags & 2) ? fuzz::gzip(labels) : labels);

  fuzz::expect_input_errors([&] {
    data::DatasetContext context;
    context.split = test ? "test" : "train";
    data::IdxImages dataset(options, context);
    // Every example the reader accepted must be readable; bounded work per input.
    std::vector<std::int64_t> indices(static_cast<std::size_t>(std::min<std::int64_t>(dataset.size(), 64)));
    std::iota(indices.begin(), indices.end(), 0);
    Batch batch;
    dataset.read(indices, batch);
  });
  return 0;
}
