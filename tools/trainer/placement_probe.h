// The measurement behind `auto` placement: a throwaway copy of the model reads a few batches
// through counting stores, which record how many unique rows each table touches per step,
// how many were still new at the end and how many came back in later batches (placement.h
// decides from that).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/optim/optimizer_options.h"
#include "data/loader.h"
#include "models/model.h"
#include "tools/trainer/cluster_options.h"
#include "tools/trainer/placement.h"

namespace aiacc::trainer {

// Counts the rows the probe batches touch of one table. Not thread-safe.
class ProbeCounter {
 public:
  void add(std::span<const std::int64_t> ids);  // a row the batch touches again counts once
  void end_batch();
  // unique_rows_per_step, rows_seen, new_rows_last_batch, rows_in_one_batch,
  // rows_in_two_batches and probe_batches; the rest of `probe` is left as it is.
  void fill(TableProbe& probe) const;

 private:
  std::unordered_set<std::int64_t> batch_;                     // rows of the current batch
  std::unordered_map<std::int64_t, std::int64_t> batches_of_;  // row -> batches that touched it
  std::int64_t unique_total_ = 0, new_last_ = 0, batches_ = 0;
};

// Builds `model` with counting stores (rows initialised like the real ones, never updated) and,
// when some table's rule is auto, runs cluster.placement_probe_batches batches of epoch 0 from
// `loader` through it in eval mode. Returns a probe per table (all tables, measured or not),
// with the loader's batches per epoch and the table's EmbeddingTableSpec::max_rows.
// `worker_batches`: the batches each worker reads in the job (its steps x
// train.gradient_accumulation_steps), which TableProbe::worker_batches holds.
std::map<std::string, TableProbe> probe_tables(const models::ModelOptions& model,
                                               const models::ModelContext& context,
                                               const optim::OptimizerOptions& sparse_optimizer,
                                               const ClusterOptions& cluster, data::Loader& loader,
                                               std::int64_t worker_batches);

}  // namespace aiacc::trainer
