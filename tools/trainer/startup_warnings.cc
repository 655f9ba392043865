#include "tools/trainer/startup_warnings.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/config/diff.h"
#include "core/log.h"

namespace aiacc::trainer {
namespace {

// Settings that change nothing, kept for switching a feature on later (--set cluster.servers=2,
// --set model.type=resnet): a warning each, naming the keys and why (unknown keys are refused
// by the config reader).
void warn_no_effect(const std::string& where, const std::vector<std::string>& keys, const std::string& why) {
  if (keys.empty()) return;
  log::get("trainer")->warn("{}{} {} no effect: {}", where.empty() ? "" : where + ": ", fmt::join(keys, ", "),
                            keys.size() == 1 ? "has" : "have", why);
}

}  // namespace

void warn_unused_settings(const JobOptions& options) {
  if (options.cluster.servers == 0) {
    std::vector<std::string> unused;
    const JobOptions defaults;
    for (const auto& change : config::yaml_differences(resolved_yaml(defaults), resolved_yaml(options))) {
      if (change.key.starts_with("cluster.ps.")) unused.push_back(change.key);
    }
    warn_no_effect("", unused, "the job has no parameter servers (cluster.servers: 0)");
  } else {
    const auto& ps = options.cluster.ps;
    if (ps.cache_staleness > 0 && ps.cache_rows == 0) {
      warn_no_effect("", {"cluster.ps.cache_staleness"}, "cluster.ps.cache_rows is 0 (no hot-row cache to serve from)");
    }
    if (ps.cache_rows > 0 && ps.consistency == "sync") {
      warn_no_effect("", {"cluster.ps.cache_rows"},
                     "consistency sync takes only this step's rows, so a cache would serve none and none is "
                     "kept (async or bounded tables take a cache with cluster.ps.cache_staleness)");
    }
    // The workers' clients and the shards both take min(grace, timeout_s) (ProcessGroup):
    // a longer grace was cut short without a word.
    if (ps.reconnect_grace_s > ps.timeout_s) {
      log::get("trainer")->warn("cluster.ps.reconnect_grace_s: {} is above cluster.ps.timeout_s: {}, which caps it: a "
                                "dropped connection between a worker and a shard fails the job after {} s (raise "
                                "cluster.ps.timeout_s for a longer grace)",
                                ps.reconnect_grace_s, ps.timeout_s, ps.timeout_s);
    }
  }
  auto warn_unused_blocks = [](const config::TypedBlocks& blocks, const std::string& type_key, const std::string& type) {
    for (const auto& block : blocks.unused(type)) {
      warn_no_effect(block.where, block.keys,
                     fmt::format("{} is {} (only the options of the selected type are used)", type_key, type));
    }
  };
  warn_unused_blocks(options.model.options, "model.type", options.model.type);
  warn_unused_blocks(options.data.train.options, "data.train.type", options.data.train.type);
  warn_unused_blocks(options.data.test.options, "data.test.type", options.data.test.type);
}

namespace {

// The model's batch-norm layers, counted by their running means (BatchNorm's buffers, under
// PyTorch's state-dict names): the model interface names no layers, and no other layer keeps one.
int batch_norm_layers(models::Model& model) {
  int layers = 0;
  for (const auto& [name, tensor] : model.buffers()) layers += name.ends_with(".running_mean") ? 1 : 0;
  return layers;
}

}  // namespace

void warn_defeated_settings(const JobOptions& options, models::Model& model, const std::vector<std::string>& ps_tables,
                            std::int64_t steps, int workers) {
  if (options.cluster.sync_batch_norm && batch_norm_layers(model) == 0) {
    warn_no_effect("", {"cluster.sync_batch_norm"},
                   fmt::format("model.type {} has no batch-norm layer, so there are no batch statistics to "
                               "synchronise", options.model.type));
  } else if (options.cluster.sync_batch_norm && workers == 1) {
    warn_no_effect("", {"cluster.sync_batch_norm"},
                   "the job has one worker (cluster.workers 1): its batch statistics are already the whole batch's");
  }
  // A shard admits an id on its min_count-th request, pulls and pushes alike (ps::ServerTable). A
  // worker pulls an id at most once a micro-batch (its prefetch being that pull; K =
  // train.gradient_accumulation_steps a step) and pushes it at most once a step; a sync shard
  // applies the step's pushes of every worker as one. Past that no id is ever admitted.
  const bool sync = options.cluster.ps.consistency == "sync";
  const std::int64_t min_count = options.cluster.ps.min_count;
  const std::int64_t pulls = options.train.gradient_accumulation_steps;
  const std::int64_t requests = sync ? steps * (workers * pulls + 1) : steps * workers * (pulls + 1);
  if (!ps_tables.empty() && steps > 0 && min_count > requests) {
    const std::string per_step =
        pulls > 1 ? fmt::format("each worker pulling an id at most once in each of a step's {} micro-batches and "
                                "pushing it at most once a step", pulls)
                  : std::string("each worker pulling and pushing an id at most once a step");
    log::get("trainer")->warn(
        "cluster.ps.min_count: {} exceeds the {} requests an id can get in this job ({} steps x ({}), {}{}): the "
        "parameter servers never create a row of {} (rows restored from a checkpoint aside), so every pull returns "
        "the initial values and the tables never learn; lower cluster.ps.min_count",
        min_count, requests, steps,
        sync ? (pulls > 1 ? fmt::format("{} workers x {} pulls + 1 push", workers, pulls)
                          : fmt::format("{} workers' pulls + 1 push", workers))
             : fmt::format("{} workers x {}", workers, pulls + 1),
        per_step, sync ? ", a sync step's pushes applied as one" : "", fmt::join(ps_tables, ", "));
  }
}


}  // namespace aiacc::trainer
