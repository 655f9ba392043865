// Builders from the `data:` section.
#include "data/data_options.h"

#include <fmt/format.h>

#include <utility>

#include "core/util/cpus.h"

namespace aiacc::data {

void DataOptions::validate(const config::Node& node) const {
  if (node.child("test").present() || train.type == test.type) return;
  node.fail(fmt::format("data.train reads {} but no data.test is given, so evaluation would read the default "
                        "data set ({}): add a data.test block (e.g. test: {{type: {}}})",
                        train.type, test.type, train.type));
}

std::unique_ptr<Dataset> make_dataset(const DatasetOptions& options, const DatasetContext& context) {
  return dataset_registry().create(options.type, options.options.block(options.type), context);
}

std::vector<InputFile> data_files(const DataOptions& options) {
  std::vector<InputFile> files;
  for (const auto& [split, dataset] : {std::pair{"train", &options.train}, std::pair{"test", &options.test}}) {
    auto split_files = input_files(dataset->type, dataset->options.block(dataset->type), DatasetContext{split, 0});
    files.insert(files.end(), split_files.begin(), split_files.end());
  }
  return files;
}

void check_data_files(const DataOptions& options) { check_input_files(data_files(options)); }

std::int64_t resolve_prefetch_batches(std::int64_t configured, std::size_t cpus, bool host_compute) {
  if (configured != kAutoPrefetch) return configured;
  return cpus == 1 && host_compute ? 0 : LoaderOptions{}.prefetch_batches;
}

LoaderOptions loader_options(const DataOptions& options, bool training, std::uint64_t seed, bool host_compute) {
  LoaderOptions loader;
  loader.batch_size = options.batch_size;
  loader.prefetch_batches =
      resolve_prefetch_batches(options.prefetch_batches, util::usable_cpus(), host_compute);
  loader.timeout_s = options.timeout_s;
  loader.seed = seed;
  if (training) {
    loader.shuffle = options.shuffle;
    loader.drop_last = options.drop_last;
    loader.augment = options.augment;
  } else {
    loader.shuffle = false;
    loader.drop_last = false;
    loader.augment = AugmentOptions{};
  }
  return loader;
}

}  // namespace aiacc::data
