// The measurement behind `auto` placement: a throwaway copy of the model reads a few batches
// through counting stores, which record how many unique rows each table touches per step and
// whether new rows were still appearing at the end (placement.h decides from that).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/optim/optimizer_options.h"
#include "data/loader.h"
#include "models/model.h"
#include "tools/trainer/cluster_options.h"
#include "tools/trainer/placement.h"

namespace aiacc::trainer {

// Builds `model` with counting stores (rows initialised like the real ones, never updated) and,
// when some table's rule is auto, runs cluster.placement_probe_batches batches of epoch 0 from
// `loader` through it in eval mode. Returns a probe per table (all tables, measured or not).
std::map<std::string, TableProbe> probe_tables(const models::ModelOptions& model,
                                               const models::ModelContext& context,
                                               const optim::OptimizerOptions& sparse_optimizer,
                                               const ClusterOptions& cluster, data::Loader& loader,
                                               std::int64_t total_steps);

}  // namespace aiacc::trainer
