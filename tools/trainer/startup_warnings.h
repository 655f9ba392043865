// Start-up warnings about settings that change nothing in this job (they are kept, not refused:
// a job may carry them for switching a feature on later, --set cluster.servers=2 or --set
// model.type=resnet). Unknown keys and contradictions are refused by the config reader instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "tools/trainer/job_options.h"

namespace aiacc::trainer {

// What the options alone show to be useless: cluster.ps.* without servers, a hot-row cache
// that serves nothing, a reconnect grace above the timeout that caps it, options of a model or
// dataset type other than the selected one. One warning each, naming the keys and why.
void warn_unused_settings(const JobOptions& options);

// What only the built job shows to be useless: cluster.sync_batch_norm on a model without batch
// norm or with one worker, and a cluster.ps.min_count that no id can reach in `steps` steps of
// `workers` workers for the tables on the servers (`ps_tables`).
void warn_defeated_settings(const JobOptions& options, models::Model& model, const std::vector<std::string>& ps_tables,
                            std::int64_t steps, int workers);

}  // namespace aiacc::trainer
