// The job's `data:` section: which dataset each split reads, batching, shuffling, prefetching
// and augmentation; and the two functions the trainer builds data from.
//
//   data:
//     batch_size: 64
//     train: {type: idx_images, idx_images: {limit: 1000}}
//     test: {type: idx_images}
//     augment: {random_crop_padding: 4, horizontal_flip: true}
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config/schema.h"
#include "data/augment.h"
#include "data/dataset.h"
#include "data/loader.h"

namespace aiacc::data {

// One split's dataset: `type` names a registered dataset, `<type>:` holds its options.
struct DatasetOptions {
  std::string type = "idx_images";
  config::TypedBlocks options;

  template <class V>
  void visit(V& v) {
    v.field("type", type, "dataset type (a registered name)", dataset_registry().name_check());
    v.blocks(dataset_registry(), type, options, "options of each dataset type");
  }
};

// data.prefetch_batches: chosen by the CPUs the process may run on and where it computes
// (resolve_prefetch_batches).
inline constexpr std::int64_t kAutoPrefetch = -1;

struct DataOptions {
  std::int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = true;
  std::int64_t prefetch_batches = kAutoPrefetch;
  double timeout_s = 600;
  DatasetOptions train;
  DatasetOptions test;
  AugmentOptions augment;

  template <class V>
  void visit(V& v) {
    v.field("batch_size", batch_size, "examples per batch on each worker (global batch = "
            "batch_size x workers)", config::in_range<std::int64_t>(1, 1 << 20));
    v.field("shuffle", shuffle, "reshuffle the training set every epoch (from the seed and epoch)");
    v.field("drop_last", drop_last, "training skips the incomplete last batch so every worker "
            "runs the same number of steps (false: one worker only)");
    v.field("prefetch_batches", prefetch_batches, "batches read ahead in the background per loader "
            "(0: no background thread, each batch is read by the training thread when it needs it; -1: "
            "4, or 0 where a worker computing on the host can keep one CPU busy only, as a pinned one or one "
            "in a container limited to one CPU: a reader thread there can only take turns with training)",
            config::in_range<std::int64_t>(kAutoPrefetch, 1024));
    v.field("timeout_s", timeout_s, "seconds to wait for the background reader's next batch before "
            "failing (stalled storage; not applied where no background thread reads: prefetch_batches 0, or "
            "-1 on one CPU)",
            config::greater_than(0.0));
    v.field("train", train, "the training split's dataset");
    v.field("test", test, "the evaluation split's dataset");
    v.field("augment", augment, "augmentation of training image batches (never applied to test)");
  }
  // A train split of another type than the default needs its test split given: it would
  // otherwise be evaluated on the default data set (Fashion-MNIST's test images).
  void validate(const config::Node& node) const;
};

// Builds the dataset `options` selects for `context` (split and seed). Throws ConfigError for
// an unknown type or bad options, DataError for bad data files.
std::unique_ptr<Dataset> make_dataset(const DatasetOptions& options, const DatasetContext& context);

// Checks the files both splits read (check_input_files) without reading them: a launcher that
// starts the job's processes on this machine reports a missing data file once, before it
// starts any. ConfigError naming the key and the path.
void check_data_files(const DataOptions& options);

// The files both splits read (input_files), train's first; empty for datasets that read none.
std::vector<InputFile> data_files(const DataOptions& options);

// Loader settings for one split. Training: data.shuffle, data.drop_last and data.augment.
// Evaluation (training == false): in order, no augmentation, no dropped examples, so every
// test example is scored exactly once across workers; workers may then run different numbers of
// batches (by at most one), so evaluation metrics are summed across workers after the loop.
// data.prefetch_batches is resolved for the CPUs this process can keep busy (usable_cpus: its
// affinity and its cgroup's CPU limit) and `host_compute` (resolve_prefetch_batches).
LoaderOptions loader_options(const DataOptions& options, bool training, std::uint64_t seed,
                             bool host_compute = true);

// The read-ahead depth a loader uses for data.prefetch_batches = `configured`, in a process that
// may run on `cpus` CPUs (0: unknown) whose training thread computes on the host or not (a GPU
// worker's waits on its device). kAutoPrefetch gives 0 for a host worker on one CPU, where a
// background reader only takes turns with training at two thread hand-offs a batch (flights
// on one pinned core: 8-10% more samples/s without it), else LoaderOptions' default (4).
// Other values stay.
std::int64_t resolve_prefetch_batches(std::int64_t configured, std::size_t cpus, bool host_compute);

}  // namespace aiacc::data
