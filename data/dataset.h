// The Dataset interface and its registry: a dataset is a random-access set of examples that
// fills Batches (core/batch.h) for the loader. Built-in datasets register themselves:
//   class MyData : public aiacc::data::Dataset {
//    public:
//     struct Options { int64_t size = 100;
//       template <class V> void visit(V& v) { v.field("size", size, "examples"); } };
//     MyData(const Options& options, const aiacc::data::DatasetContext& context);
//     ...
//   };
//   AIACC_REGISTER_DATASET("my_data", MyData);
// and a job selects it with `data: {train: {type: my_data, my_data: {size: 1000}}}`.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/registry.h"

namespace aiacc::data {

// What a dataset is built for: which split, and the seed of anything it generates.
struct DatasetContext {
  std::string split = "train";  // "train" or "test"
  std::uint64_t seed = 0;       // synthetic data and anything random in the dataset
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  // One example as a model sees it (shape [C, H, W] for images, task, number of classes).
  virtual InputSpec spec() const = 0;

  // Number of examples; indices passed to read() lie in [0, size()).
  virtual std::int64_t size() const = 0;

  // Fills `batch` with the examples `indices`, in that order: (re)allocates batch.inputs as
  // [n, ...spec().example_shape] f32 and batch.labels as [n] (i64 class ids for classification).
  // Throws DataError for bad data (naming the file and record) and InternalError for an index
  // out of range. Thread-safety: the built-in datasets are immutable after construction, so
  // read() may be called concurrently from several threads; the Loader calls it from its one
  // background thread. A dataset with mutable state must document its own rules.
  virtual void read(std::span<const std::int64_t> indices, Batch& batch) = 0;

  // The best achievable AUC on this split when known (data sampled from a known teacher): the
  // AUC of the teacher's own probabilities against this split's labels. A trained model's test
  // AUC is judged against it. nullopt for real data (and for classification data).
  virtual std::optional<double> reference_auc() const { return std::nullopt; }
};

using DatasetRegistry = Registry<Dataset, const DatasetContext&>;

// Every dataset type linked into the program (a function-local static; built-ins register
// at static-initialisation time, so data_dep is linked whole).
DatasetRegistry& dataset_registry();

// Throws ConfigError unless `context.split` is "train" or "test"; `dataset` names the type.
void check_split(const DatasetContext& context, const std::string& dataset);

// A file a dataset reads, as its config names it.
struct InputFile {
  std::string key;           // "data.train.criteo_tsv.train_file"
  std::string path;          // as it is opened: a relative path is relative to the working directory
  std::string missing_hint;  // how to get the file when it is missing, or ""
};

// ConfigError naming the key and the path for the first file that is missing, not a regular
// file (a folder, /dev/null) or empty: a restart cannot make those readable, so the job fails
// as misconfigured (exit 2, never restarted). What else keeps a file from being read (a folder
// this user may not enter) is the reader's DataError.
void check_input_files(const std::vector<InputFile>& files);

// The files dataset type `type` with `options` reads for `context`'s split, so that a launcher
// can check them once before it starts any process; empty for types that read none or do not
// say. A dataset says by declaring
//   static std::vector<InputFile> input_files(const Options&, const DatasetContext&);
// (AIACC_REGISTER_DATASET registers it), and checks them itself as it opens them.
std::vector<InputFile> input_files(const std::string& type, const config::Node& options,
                                   const DatasetContext& context);

namespace detail {
using InputFileLister = std::function<std::vector<InputFile>(const config::Node&, const DatasetContext&)>;
bool add_input_file_lister(const std::string& type, InputFileLister lister);

template <class Class>
bool register_input_files(const std::string& type) {
  using Options = typename Class::Options;
  if constexpr (requires(const Options& options, const DatasetContext& context) {
                  { Class::input_files(options, context) } -> std::same_as<std::vector<InputFile>>;
                }) {
    return add_input_file_lister(type, [](const config::Node& node, const DatasetContext& context) {
      return Class::input_files(config::read<Options>(node), context);
    });
  }
  return false;
}
}  // namespace detail

}  // namespace aiacc::data

#define AIACC_REGISTER_DATASET(name, Class)                       \
  AIACC_REGISTER(::aiacc::data::dataset_registry(), name, Class); \
  [[maybe_unused]] static const bool AIACC_CONCAT_(aiacc_input_files_, __COUNTER__) = \
      ::aiacc::data::detail::register_input_files<Class>(name)
