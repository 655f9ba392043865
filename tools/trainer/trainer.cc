// Single-process training loop. Distributed synchronisation (ring, parameter servers) plugs in
// through the parameters' grad-ready hooks; here dense gradients are local and sparse rows live
// in local embedding stores.
#include "tools/trainer/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "core/config/diff.h"
#include "core/device_ops.h"
#include "core/embedding/local_embedding_store.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/safetensors.h"
#include "core/log.h"
#include "core/optim/loss_scaler.h"
#include "core/optim/lr_schedule.h"
#include "core/optim/optimizer.h"
#include "core/optim/sparse_row_optimizer.h"
#include "core/trace.h"
#include "core/util/float_mode.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "ps/remote_embedding_store.h"
#include "ps/shard_checkpoint.h"
#include "ring/detail/element_ops.h"
#include "ring/device_collective.h"
#include "ring/device_gradient_fuser.h"
#include "ring/gradient_fuser.h"
#include "tools/trainer/checkpoint.h"
#include "tools/trainer/early_stopping.h"
#include "tools/trainer/grad_accumulation.h"
#include "tools/trainer/grad_clipping.h"
#include "tools/trainer/launch.h"
#include "tools/trainer/metrics.h"
#include "tools/trainer/placement.h"
#include "tools/trainer/placement_probe.h"
#include "tools/trainer/process_group.h"
#include "tools/trainer/ps_cache_report.h"
#include "tools/trainer/replicated_embedding_store.h"
#include "tools/trainer/run_folder.h"
#include "tools/trainer/run_folder_lock.h"
#include "tools/trainer/startup_warnings.h"
#include "tools/trainer/stop_signal.h"
#include "tools/trainer/worker_pace.h"

namespace aiacc::trainer {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A worker's own tables (local or replicated) are read and updated by its compute threads only.
// With one thread the partitions buy nothing and cost a cold miss or three each per request
// (its lock, slots and arena are separate allocations): one partition then (a cold push of 444
// rows of dim 1: 22 -> 14 us). Results do not depend on the partition count.
LocalEmbeddingStoreOptions worker_store_options() {
  LocalEmbeddingStoreOptions options;
  if (omp_get_max_threads() == 1) options.num_partitions = 1;
  return options;
}

data::LoaderOptions loader_options(const JobOptions& o, bool training) {
  return data::loader_options(o.data, training, o.job.seed, /*host_compute=*/o.job.device == "cpu");
}

// Copies `saved` into `targets` by name. Every target must be present with the same shape and
// dtype; `what` and `where` name the checkpoint part in errors.
void restore_by_name(const NamedTensors& saved, const NamedTensors& targets, const std::string& what,
                     const std::string& where) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, tensor] : saved) by_name[name] = &tensor;
  for (const auto& [name, target] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      throw DataError(fmt::format("{}: the {} has no tensor '{}' (was it saved by another model?)",
                                  where, what, name));
    }
    const Tensor& source = *it->second;
    if (source.shape() != target.shape() || source.dtype() != target.dtype()) {
      throw DataError(fmt::format("{}: {} tensor '{}' is {} {} but the model has {} {}", where, what,
                                  name, dtype_name(source.dtype()), source.shape().str(),
                                  dtype_name(target.dtype()), target.shape().str()));
    }
    Tensor(target).copy_from(source);
  }
  // Tensors this model lacks are a model that changed (a part turned off, a smaller head):
  // leaving them out would evaluate or train something other than what was saved, silently.
  std::set<std::string> wanted;
  for (const auto& [name, target] : targets) wanted.insert(name);
  std::vector<std::string> extra;
  for (const auto& [name, tensor] : saved) {
    if (!wanted.count(name)) extra.push_back(name);
  }
  if (!extra.empty()) {
    const std::size_t shown = std::min<std::size_t>(extra.size(), 5);
    throw DataError(fmt::format("{}: the {} holds {} tensor(s) this model does not have: {}{} (was it saved by "
                                "another model?)",
                                where, what, extra.size(), fmt::join(extra.begin(), extra.begin() + shown, ", "),
                                extra.size() > shown ? fmt::format(" and {} more", extra.size() - shown) : ""));
  }
}

// The learning-rate schedule of the optimiser section `section` ("optimizer" or
// "sparse_optimizer"); its errors name the full key, e.g. optimizer.schedule.total_steps.
std::unique_ptr<optim::LrSchedule> make_schedule(const optim::OptimizerOptions& options,
                                                 std::int64_t total_steps, const std::string& section) {
  try {
    return std::make_unique<optim::LrSchedule>(options.schedule, options.lr, total_steps);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}.{} (the job has {} steps: train.epochs x steps per epoch, "
                                  "capped by train.max_steps)", section, e.what(), total_steps));
  }
}

// False when a float tensor holds a NaN or an infinity (the check the all-reduce's fp16
// fallback uses).
bool all_finite(const Tensor& t) {
  return !ring::detail::has_non_finite(t.dtype(), t.raw_data(), static_cast<std::size_t>(t.numel()));
}

// The name of the first parameter whose gradient holds a NaN or an infinity, or "". On a device
// all are checked there at once (one wait per step).
std::string first_nonfinite_grad(const std::vector<Parameter*>& params, Device device) {
  if (device.is_cpu()) {
    for (Parameter* p : params) {
      if (!all_finite(p->grad())) return p->name();
    }
    return "";
  }
  std::vector<std::pair<const float*, std::int64_t>> grads;
  for (Parameter* p : params) grads.emplace_back(p->grad().data<float>(), p->grad().numel());
  const std::int64_t bad = device_ops(device).first_nonfinite(device, grads);
  return bad < 0 ? "" : params[static_cast<std::size_t>(bad)]->name();
}

// Host copies of device tensors (CPU tensors as they are): for checkpoints, which read the
// bytes on the host.
NamedTensors on_host(NamedTensors named) {
  for (auto& entry : named) entry.second = entry.second.to(Device::cpu());
  return named;
}

// Whether several workers' dense gradients on `device` are all-reduced on the devices
// (cluster.ring.device_collectives). NCCL refuses two ranks on one GPU, so "auto" takes it only
// when every worker has a device of its own (job.device: cuda, local rank r on GPU r); "nccl"
// with cuda:K is refused where the local launcher starts every worker on this one host. A model
// that keeps some dense parameter on the host (its choice in to()) cannot hand NCCL one device
// buffer: "auto" then stages through the host, "nccl" names the tensor.
bool use_device_collectives(const JobOptions& options, const ProcessRole& role, Device device,
                            const std::vector<Parameter*>& dense_params) {
  const std::string& mode = options.cluster.ring.device_collectives;
  if (device.is_cpu()) {
    if (mode == "nccl") {
      throw ConfigError(fmt::format("cluster.ring.device_collectives: nccl all-reduces GPU memory, but job.device "
                                    "is {}; set job.device: cuda, or device_collectives: auto", options.job.device));
    }
    return false;
  }
  const bool own_device = options.job.device == "cuda";
  const bool built = ring::has_device_collective(device.kind);
  if (mode == "nccl") {
    if (!built) {
      throw ConfigError("cluster.ring.device_collectives: nccl: this aiacc-train was built without NCCL; set host");
    }
    if (!own_device && role.launcher == "local") {
      throw ConfigError(fmt::format("cluster.ring.device_collectives: nccl needs a GPU per worker, but job.device: {} "
                                    "puts all {} workers of this host on one (NCCL refuses two ranks on one GPU); "
                                    "set job.device: cuda, or device_collectives: host", options.job.device,
                                    options.cluster.workers));
    }
  } else if (mode != "auto" || !built || !own_device) {
    return false;
  }
  for (const Parameter* p : dense_params) {
    if (p->value().device() == device) continue;
    if (mode == "nccl") {
      throw ConfigError(fmt::format("cluster.ring.device_collectives: nccl needs every dense parameter on {}, but the "
                                    "model keeps '{}' on {}; set host", device.str(), p->name(),
                                    p->value().device().str()));
    }
    return false;
  }
  return true;
}

// The batch's dense inputs and labels copied to `device` where the model takes them there
// (sparse ids stay on the host).
void move_batch(Batch& batch, Device device, const models::Model& model) {
  if (!model.batch_on_device()) return;
  batch.inputs = batch.inputs.to(device);
  batch.labels = batch.labels.to(device);
}

// " x 4 micro-batches a step" with gradient accumulation, else "".
std::string micro_batches_text(const JobOptions& options) {
  const std::int64_t k = options.train.gradient_accumulation_steps;
  return k > 1 ? fmt::format(" x {} micro-batches a step", k) : std::string();
}

// The training steps of `workers` workers: per epoch (rank 0's shard, as every worker's with
// drop_last) and in all (0: no full batch, see no_full_batch_error). ConfigError for drop_last
// false with several workers: their shards could differ by a batch, and so their step counts,
// and the extra step's collectives would wait for peers that never join them; and with
// gradient accumulation, where the short last batch would weigh as much as a full one in its
// step's mean.
struct StepPlan {
  std::int64_t per_epoch = 0, total = 0;
};
StepPlan plan_steps(const JobOptions& options, data::Dataset& train, int rank, int workers) {
  if (!options.data.drop_last && workers > 1) {
    throw ConfigError(fmt::format("data.drop_last: false with {} workers: every worker must train the same number of "
                                  "steps, so training drops the incomplete last batch (set it true; evaluation reads "
                                  "every example regardless)",
                                  workers));
  }
  if (!options.data.drop_last && options.train.gradient_accumulation_steps > 1) {
    throw ConfigError(fmt::format("data.drop_last: false with train.gradient_accumulation_steps {}: a step averages "
                                  "its micro-batches alike, so the epoch's short last batch would weigh as much as a "
                                  "full one (set it true; evaluation reads every example regardless)",
                                  options.train.gradient_accumulation_steps));
  }
  StepPlan plan;
  // A step takes gradient_accumulation_steps batches: an epoch's batches left over after its
  // last whole step are not trained on, as drop_last drops an incomplete batch.
  plan.per_epoch = data::Loader(train, loader_options(options, true), rank, workers).batches_per_epoch() /
                   options.train.gradient_accumulation_steps;
  plan.total = options.train.epochs * plan.per_epoch;
  if (options.train.max_steps > 0) plan.total = std::min(plan.total, options.train.max_steps);
  return plan;
}

std::string no_full_batch_error(const JobOptions& options, std::int64_t examples, int workers) {
  const std::int64_t micro_batches = options.train.gradient_accumulation_steps;
  if (micro_batches > 1) {
    return fmt::format("data.batch_size {} x train.gradient_accumulation_steps {} leaves no full step in {} training "
                       "examples for each of {} workers",
                       options.data.batch_size, micro_batches, examples, workers);
  }
  return fmt::format("data.batch_size {} leaves no full batch in {} training examples for each of {} workers",
                     options.data.batch_size, examples, workers);
}

// What a split's examples look like, for comparing the two splits in an error message.
std::string describe_examples(const InputSpec& spec) {
  std::string out = spec.task == Task::binary ? "binary labels" : fmt::format("{} classes", spec.num_classes);
  out += fmt::format(", examples {}", spec.example_shape.str());
  if (!spec.sparse_fields.empty()) out += fmt::format(", categorical fields [{}]", fmt::join(spec.sparse_fields, ", "));
  return out;
}

// One line per file the splits read, with its size: the same examples on every worker need the
// same files, not only as many examples.
std::string data_files_listing(const data::DataOptions& data) {
  std::string listing;
  for (const data::InputFile& file : data::data_files(data)) {
    std::error_code error;
    const std::uintmax_t bytes = std::filesystem::file_size(file.path, error);
    listing += fmt::format("{}: {}, {}\n", file.key, file.path, error ? "size unknown" : fmt::format("{} bytes", bytes));
  }
  return listing;
}

// The test split must give what the model is built for from the train split: a job without a
// data.test block otherwise evaluated on the default data set (Fashion-MNIST's test images).
void check_splits_agree(const data::DataOptions& data, const InputSpec& train, const InputSpec& test) {
  const std::string train_examples = describe_examples(train), test_examples = describe_examples(test);
  if (train_examples == test_examples) return;
  throw ConfigError(fmt::format("data.test (type {}) gives {}, but data.train (type {}) gives {}: the test split "
                                "must match the train split (a job without a data.test block gets the default, {})",
                                data.test.type, test_examples, data.train.type, train_examples,
                                data::DatasetOptions{}.type));
}


// Where an evaluation of the checkpoint `directory` is recorded: the run it belongs to
// (<run>/checkpoints/step-N: beside that run's training records, whatever this job's run_dir
// and name say), or `job_run` for a checkpoint kept outside a run's checkpoints folder.
struct EvalRecordPlace {
  std::filesystem::path run;
  bool checkpoint_run = false;  // the checkpoint's own run, not this job's
};
EvalRecordPlace eval_record_place(const std::string& directory, const std::filesystem::path& job_run) {
  std::error_code ec;
  std::filesystem::path checkpoint = std::filesystem::weakly_canonical(directory, ec);
  if (ec) checkpoint = std::filesystem::absolute(directory).lexically_normal();
  if (checkpoint.filename().empty()) checkpoint = checkpoint.parent_path();  // "step-N/"
  const std::filesystem::path folder = checkpoint.parent_path();
  if (folder.filename() == "checkpoints") return {folder.parent_path(), true};
  return {job_run, false};
}

// Evaluation and checkpoint time (not training time) of a run: in all, and before its first
// step ended.
struct PausedSeconds {
  double total = 0, before_steady = 0;
};

// The run's time (less `paused`) and throughput over its `steps` steps of `samples_per_step`
// samples: after the first step, which ended at `steady_start` (its start-up is no measure of
// the job's speed: the loader's first batch, the collectives' first connections), and over all
// steps. A run of one step has no steady part: both figures are its own.
void measure_throughput(TrainResult& result, std::int64_t steps, Clock::time_point start,
                        std::optional<Clock::time_point> steady_start, PausedSeconds paused,
                        std::int64_t samples_per_step) {
  const auto end = Clock::now();
  const auto samples = [&](std::int64_t n) { return static_cast<double>(n * samples_per_step); };
  result.seconds = std::chrono::duration<double>(end - start).count() - paused.total;
  result.samples_per_second_all_steps = samples(steps) / std::max(result.seconds, 1e-9);
  result.samples_per_second = result.samples_per_second_all_steps;
  if (!steady_start || steps < 2) return;
  const double steady_seconds =
      std::chrono::duration<double>(end - *steady_start).count() - (paused.total - paused.before_steady);
  result.warmup_steps = 1;
  result.warmup_seconds = result.seconds - steady_seconds;
  result.samples_per_second = samples(steps - 1) / std::max(steady_seconds, 1e-9);
}

std::string describe_throughput(const TrainResult& result) {
  if (result.warmup_steps == 0) {
    return fmt::format("{:.1f} samples/s (start-up included: no step after the first)", result.samples_per_second);
  }
  return fmt::format("{:.1f} samples/s after the first step ({:.2f} s with start-up; {:.1f} samples/s over all steps)",
                     result.samples_per_second, result.warmup_seconds, result.samples_per_second_all_steps);
}

// The record that opens a run's records in metrics.jsonl: successive runs of one folder (a
// resume, a max_restarts restart that repeats the steps since the last checkpoint) append to
// the same file, and a reader tells them apart by it.
nlohmann::json run_start_record(const JobOptions& options, std::int64_t step, std::int64_t total_steps,
                                const std::string& resumed_from, const std::string& trace_name) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char time[32];
  std::strftime(time, sizeof time, "%Y-%m-%dT%H:%M:%SZ", &utc);
  nlohmann::json record = {{"kind", "run_start"}, {"step", step}, {"total_steps", total_steps},
                           {"resumed_from", resumed_from.empty() ? nlohmann::json() : nlohmann::json(resumed_from)},
                           {"workers", options.cluster.workers}, {"servers", options.cluster.servers},
                           {"global_batch", options.data.batch_size * options.cluster.workers *
                                                options.train.gradient_accumulation_steps},
                           {"time", time}};
  // The local launcher numbers its attempts (cluster.max_restarts) in the ranks' environment.
  if (const int restart = restart_attempt(); restart > 0) record["restart"] = restart;
  if (!trace_name.empty()) record["trace"] = trace_name;
  return record;
}

}  // namespace

struct Trainer::State {
  JobOptions options;
  std::shared_ptr<spdlog::logger> log = log::get("trainer");
  // Shared with the loaders' reading threads (data::Loader).
  std::shared_ptr<data::Dataset> train_data;
  std::shared_ptr<data::Dataset> test_data;
  std::unique_ptr<models::Model> model;
  Device device;  // job.device: where the model's parameters and the step's tensors live
  std::vector<Parameter*> dense_params;
  std::vector<Parameter*> sparse_params;
  std::map<std::string, std::shared_ptr<EmbeddingStore>> stores;  // by table name
  std::shared_ptr<ProcessGroup> group;  // null: a single process
  std::unique_ptr<ring::GradientSync> fuser;
  // Several workers on devices without device collectives (cluster.ring.device_collectives:
  // host): host copies of the dense parameters, whose gradients the fuser all-reduces (each
  // filled from its device gradient as that becomes ready, during backward) and which are copied
  // back before the optimiser step.
  std::vector<std::unique_ptr<Parameter>> host_grads;
  std::vector<ReplicatedEmbeddingStore*> replicated;  // ring-placed tables (several workers)
  std::map<std::string, ps::RemoteEmbeddingStore*> remote;  // ps-placed tables
  std::map<std::string, Placement> sparse_placement;
  std::vector<PlacementDecision> placement;
  std::set<std::string> grown_replicas;  // replicated tables warned about for passing replica_max_mib
  double comm_wait_seconds = 0;  // training-thread time waiting on communication, this interval
  // train.gradient_accumulation_steps: a step's micro-batches, the one in progress, and (more
  // than one) the dense gradients' running sums, whose hooks run before the all-reduce's.
  int micro_batches = 1;
  int micro_batch = 0;
  std::unique_ptr<DenseGradAccumulator> dense_accumulator;
  EarlyStopping early_stopping{EarlyStoppingOptions{}};  // train.early_stopping
  std::string non_finite_sparse;  // a table whose row gradients were not finite this step
  std::int64_t skipped_steps = 0;
  // job.precision: fp16: the dynamic loss scale (steps whose scaled gradients overflowed are
  // skipped and the scale backs off; not errors, whatever train.non_finite says).
  std::optional<optim::DynamicLossScaler> loss_scaler;
  double run_wait_seconds = 0;   // the same over the whole run
  double run_allreduce_seconds = 0;  // gradient all-reduce time (overlapped or not), whole run
  double run_allreduce_exposed_seconds = 0;

  // Bucket sizes auto-tuning tries: 1, 4 and 16 MiB and the configured one, less those that give
  // the same single bucket as a smaller one (a 1 MB model's three would time one plan thrice).
  static std::vector<std::int64_t> tuning_bucket_sizes(std::int64_t configured, const std::vector<Parameter*>& params) {
    std::int64_t total = 0;
    for (const Parameter* p : params) total += p->value().numel() * 4;
    std::vector<std::int64_t> sizes{1 << 20, 4 << 20, 16 << 20, configured};
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    const auto first_whole = std::find_if(sizes.begin(), sizes.end(), [&](std::int64_t b) { return b >= total; });
    if (first_whole != sizes.end()) sizes.erase(first_whole + 1, sizes.end());
    return sizes;
  }
  const ring::AutoTuner* tuner = nullptr;  // the host fuser's (cluster.ring.auto_tune), else null

  // The dense gradients' all-reduce through the CPU ring (ready_order: dense_params reversed).
  // Gradients on a device are copied into host twins the moment each is ready.
  std::unique_ptr<ring::GradientSync> make_host_fuser(std::vector<Parameter*> ready_order) {
    const RingOptions& ring_options = options.cluster.ring;
    ring::FusionOptions fusion;
    fusion.bucket_bytes = ring_options.bucket_bytes;
    fusion.spec.op = ring::ReduceOp::kAverage;
    fusion.spec.wire = ring_options.wire == "f16"    ? ring::WireType::kF16
                       : ring_options.wire == "bf16" ? ring::WireType::kBf16
                                                     : ring::WireType::kNative;
    fusion.tuning.hierarchical = ring_options.hierarchical;
    if (ring_options.auto_tune) {
      fusion.tune_bucket_bytes = tuning_bucket_sizes(ring_options.bucket_bytes, ready_order);
      fusion.tune_streams = true;
    }
    // With parameter-server tables the step waits for their pushes between backward and
    // finish_step: the last bucket is all-reduced meanwhile, on the fusion thread.
    fusion.last_bucket_on_caller = remote.empty();
    if (!device.is_cpu()) {
      // The ring reduces host memory: each twin's readiness starts its bucket as on the CPU.
      for (Parameter*& p : ready_order) {
        auto twin = std::make_unique<Parameter>(p->name(), Tensor::zeros(p->value().shape(), DType::f32));
        Parameter* host = twin.get();
        p->add_grad_ready_hook([this, host](Parameter& on_device) {
          // Only the step's last micro-batch is all-reduced (gradient accumulation).
          if (micro_batch + 1 < micro_batches) return;
          host->grad().copy_from(on_device.grad());
          host->grad_ready();
        });
        host_grads.push_back(std::move(twin));
        p = host;
      }
    }
    auto fuser = std::make_unique<ring::GradientFuser>(group->dense(), std::move(ready_order), fusion);
    if (ring_options.auto_tune) {
      tuner = fuser->tuner();
      if (leader()) log_tuning_plan(*tuner);
    }
    return fuser;
  }
  // Replicas are bitwise equal on every worker, so the leader alone checks their size.
  void warn_about_grown_replicas() {
    for (const ReplicatedEmbeddingStore* table : replicated) {
      const std::string& name = table->spec().name;
      if (grown_replicas.count(name) != 0) continue;
      const auto decision = std::find_if(placement.begin(), placement.end(),
                                         [&](const PlacementDecision& d) { return d.name == name; });
      if (decision == placement.end()) continue;
      const std::string warning = grown_replica_warning(options.cluster, *decision, table->num_rows(),
                                                        static_cast<double>(table->replica_bytes()));
      if (warning.empty()) continue;
      log->warn("{}", warning);
      grown_replicas.insert(name);  // once per table
    }
  }
  // What auto-tuning tries, as the tuner will try it.
  void log_tuning_plan(const ring::AutoTuner& plan) const {
    std::set<std::int64_t> kib;
    std::set<int> streams;
    for (const ring::TuningCandidate& c : plan.candidates()) {
      kib.insert(c.bucket_bytes / 1024);
      streams.insert(c.streams);
    }
    if (plan.steps() == 0) {
      log->info("auto-tuning: {} is the only setting for this model and cluster.ring.comm.streams: nothing to tune",
                plan.current().str());
      return;
    }
    log->info("auto-tuning tries buckets of {} KiB x {} stream count(s) over the first {} steps", fmt::join(kib, ", "),
              streams.size(), plan.steps());
  }
  // The dense gradients' all-reduce on the devices (NCCL), queued during backward.
  std::unique_ptr<ring::GradientSync> make_device_fuser(std::vector<Parameter*> ready_order) {
    const RingOptions& ring_options = options.cluster.ring;
    ring::DeviceCollectiveSpec spec;
    spec.rendezvous = &group->rendezvous();
    spec.host = group->dense();
    spec.rank = rank();
    spec.world_size = workers();
    spec.device = device;
    // Each communicator's kernels hold SMs for the whole step: a few overlap buckets, more
    // only cost memory (ring/nccl/nccl_communicator.h).
    spec.streams = std::min(ring_options.comm.streams, 4);
    spec.name = "dense-gradients";
    spec.timeout_s = ring_options.comm.timeout_s;
    std::unique_ptr<ring::DeviceCollective> collective;
    // NCCL refuses two ranks on one GPU (an outer launcher with job.device: cuda:K may put them
    // there): name the key that chose NCCL.
    const auto context = [&](const std::exception& e) {
      return fmt::format("cluster.ring.device_collectives: {} on {}: {}; do two workers share this GPU? (set "
                         "job.device: cuda, or device_collectives: host)", ring_options.device_collectives,
                         device.str(), e.what());
    };
    try {
      collective = ring::make_device_collective(spec);
    } catch (const TimeoutError& e) {
      throw TimeoutError(context(e));
    } catch (const CommError& e) {
      throw CommError(context(e));
    }
    if (leader()) {
      log->info("dense gradients: all-reduced on the devices through {} ({}-byte buckets){}", collective->describe(),
                ring_options.bucket_bytes,
                ring_options.wire != "f32" || ring_options.auto_tune
                    ? "; cluster.ring.wire and auto_tune apply to the host ring only: f32, fixed buckets"
                    : "");
    }
    return std::make_unique<ring::DeviceGradientFuser>(std::move(collective), group->dense(), std::move(ready_order),
                                                       ring_options.bucket_bytes, ring::ReduceOp::kAverage);
  }

  // An epoch's batches that make whole steps.
  std::int64_t epoch_batches() const { return steps_per_epoch * micro_batches; }
  // What a step's global batch is made of, as the config names it.
  std::string global_batch_terms() const {
    return fmt::format("cluster.workers {} x data.batch_size {}{}", workers(), options.data.batch_size,
                       micro_batches > 1 ? fmt::format(" x train.gradient_accumulation_steps {}", micro_batches)
                                         : std::string());
  }
  int rank() const { return group ? group->worker() : 0; }
  int workers() const { return group ? group->workers() : 1; }
  bool leader() const { return rank() == 0; }
  bool multi_worker() const { return workers() > 1; }
  // What the dense gradients' all-reduce runs behind where the training thread does not wait for
  // it (the summary's hidden share): backward, and with parameter-server tables also the wait
  // for the row pushes and the next batch's prefetch, which come between backward and the wait
  // for the all-reduce (their buckets run on the fusion thread meanwhile).
  std::string allreduce_hidden_behind() const {
    return remote.empty() ? "backward" : "backward, the row pushes and the next batch's prefetch";
  }
  // Share of training time spent waiting on communication, from the wait summed over the workers:
  // the progress records and the summary both report this.
  double comm_wait_share(double summed_wait_seconds, double seconds) const {
    return summed_wait_seconds / workers() / std::max(seconds, 1e-9);
  }

  // Worker 0's values of every dense parameter and buffer on every worker.
  void broadcast_model() {
    if (!multi_worker()) return;
    for (auto& [name, tensor] : model_tensors()) {
      if (tensor.device().is_cpu()) {
        group->broadcast(tensor, 0);
      } else {
        Tensor staged = tensor.to(Device::cpu());  // the collectives work on host memory
        group->broadcast(staged, 0);
        tensor.copy_from(staged);
      }
    }
  }
  // Buffers (batch-norm running statistics) follow each worker's own batches: average them
  // before they are evaluated or saved.
  void average_buffers() {
    if (!multi_worker()) return;
    for (auto& [name, tensor] : model->buffers()) {
      if (tensor.dtype() != DType::f32) continue;
      Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
      std::vector<double> values(static_cast<std::size_t>(host.numel()));
      const float* data = host.data<float>();
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = data[i];
      group->sum(values);
      float* out = host.data<float>();
      for (std::size_t i = 0; i < values.size(); ++i) out[i] = static_cast<float>(values[i] / workers());
      if (!tensor.device().is_cpu()) tensor.copy_from(host);
    }
  }
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LrSchedule> schedule;
  std::unique_ptr<optim::LrSchedule> sparse_schedule;
  double sparse_lr = 0;  // the sparse optimiser's rate for the step in progress
  std::filesystem::path run_path;
  MetricsLog metrics;  // whole lines, each write checked: a full disk fails the job naming the file
  std::int64_t steps_per_epoch = 0;
  std::int64_t total_steps = 0;

  void write_metrics(const nlohmann::json& record) {
    metrics.append(record.dump());
  }

  NamedTensors model_tensors() const {
    NamedTensors named;
    for (Parameter* p : model->parameters()) {
      if (p->kind() == ParamKind::dense) named.emplace_back(p->name(), p->value());
    }
    for (auto& buffer : model->buffers()) named.push_back(std::move(buffer));
    return named;
  }

  // Rows of every table, or of the tables not on the parameter servers (those the shards
  // write themselves into the checkpoint).
  NamedTensors embedding_rows(bool include_sharded = true) const {
    NamedTensors rows;
    for (const auto& [name, store] : stores) {
      if (!include_sharded && remote.count(name)) continue;
      for (auto& named : store->save_rows()) rows.push_back(std::move(named));
    }
    return rows;
  }

  Checkpoint snapshot(std::int64_t step, std::int64_t epoch, std::int64_t batch) const {
    Checkpoint checkpoint;
    checkpoint.step = step;
    checkpoint.files["model"] = on_host(model_tensors());
    checkpoint.files["optimizer"] = on_host(optimizer->state());
    if (stores.size() > remote.size()) checkpoint.files["embeddings"] = embedding_rows(/*include_sharded=*/false);
    if (!remote.empty()) {
      // Each shard writes its rows and optimiser state into the checkpoint folder itself.
      auto client = group->ps_client();
      checkpoint.write_external = [client](const std::filesystem::path& directory) {
        return client->save_checkpoint(directory.string());
      };
    }
    // "examples": how far into the epoch's order the job is (all workers' batches so far, see
    // ShardSampler), which a resume with another worker count or batch size maps to its batch.
    checkpoint.state = {{"epoch", epoch}, {"batch", batch},
                        {"examples", batch * options.data.batch_size * workers()},
                        {"data_order", data_order()},
                        {"model", options.model.type}, {"config", resolved_yaml(options)}};
    // Which tables' rows the shards' files hold: a resume under another placement must take a
    // table that moved from the ring to the shards from the embeddings file, not the shards'.
    nlohmann::json sharded = nlohmann::json::array();
    for (const auto& [name, store] : remote) sharded.push_back(name);
    checkpoint.state["sharded_tables"] = std::move(sharded);
    if (early_stopping.tracking()) checkpoint.state["early_stopping"] = early_stopping.to_json();
    if (loss_scaler) {
      checkpoint.state["loss_scale"] = {{"scale", loss_scaler->scale()},
                                        {"clean_steps", loss_scaler->clean_steps_in_a_row()}};
    }
    return checkpoint;
  }

  // Whether two data_order()s give the same order: without shuffling the seed decides nothing.
  static bool same_order(nlohmann::json a, nlohmann::json b) {
    for (nlohmann::json* order : {&a, &b}) {
      if (!order->value("shuffle", true)) order->erase("seed");
    }
    return a == b;
  }

  // What decides the training epochs' example order (data::ShardSampler): the checkpoint's
  // position is into that order.
  nlohmann::json data_order() const {
    return {{"train_examples", train_data->size()}, {"seed", options.job.seed}, {"shuffle", options.data.shuffle}};
  }

  // A stop check (train.checkpoint.on_signal), collective over the workers: whether a stop
  // signal reached any worker or shard and, if so, the signal this worker stops on (its own,
  // else SIGINT where every signal was one, a Ctrl-C, else SIGTERM). `received`: this worker's.
  struct StopAgreement {
    int signal = 0;
    int workers = 0;     // workers that got one
    bool shard = false;  // a parameter-server shard got one
  };
  std::optional<StopAgreement> agree_on_stop(int received) {
    // [workers that got a signal, the sum of their signal numbers, shards that got one]
    std::vector<double> asked{received != 0 ? 1.0 : 0.0, static_cast<double>(received), 0.0};
    if (leader() && group && options.cluster.servers > 0) {
      // A shard's signal (a Kubernetes eviction of its pod) waits at the store.
      if (const int published = group->shard_stop_signal(); published != 0) {
        asked[0] += 1;
        asked[1] += published;
        asked[2] = 1;
      }
    }
    if (multi_worker()) group->sum(asked);
    if (asked[0] == 0) return std::nullopt;
    const int signal = received != 0 ? received : asked[1] == asked[0] * SIGINT ? SIGINT : SIGTERM;
    return StopAgreement{signal, static_cast<int>(asked[0] - asked[2]), asked[2] > 0};
  }

  // `rows` (a table's ids, values and state) with the state replaced by a fresh row's state under
  // this job's sparse optimiser.
  NamedTensors with_fresh_state(const std::string& table, NamedTensors rows, std::int64_t dim) const {
    const optim::SparseRowOptimizer rule(options.sparse_optimizer);
    const int state_floats = rule.state_floats(static_cast<int>(dim));
    for (auto& [name, tensor] : rows) {
      if (name != table + ".state" || tensor.rank() != 2) continue;
      Tensor fresh = Tensor::zeros(Shape{tensor.dim(0), state_floats});
      float* out = fresh.data<float>();
      for (std::int64_t r = 0; r < tensor.dim(0); ++r) rule.init_state(out + r * state_floats, static_cast<int>(dim));
      tensor = std::move(fresh);
    }
    return rows;
  }

  // Restores everything a checkpoint holds; returns the data position it saved (epoch, and the
  // batch of the job that saved it: resume_batch() maps it to this job's).
  // `scope` weights: what evaluating the checkpoint needs (the model and the tables' rows), not
  // the dense optimiser's state, so a checkpoint evaluates whatever optimizer the config names.
  enum class RestoreScope { training, weights };
  std::pair<std::int64_t, std::int64_t> restore(const Checkpoint& checkpoint, const std::string& where,
                                                RestoreScope scope = RestoreScope::training) {
    auto part = [&](const std::string& key) -> const NamedTensors& {
      auto it = checkpoint.files.find(key);
      if (it == checkpoint.files.end()) throw DataError(fmt::format("{}: no {} file", where, key));
      return it->second;
    };
    const std::string saved_config = checkpoint.state.value("config", std::string());
    const auto changes = config::yaml_differences(saved_config, resolved_yaml(options));
    // "" when the checkpoint's config does not say, or says what this job says too.
    const auto saved_unlike_this = [&](const std::string& key) -> std::string {
      const auto change = std::find_if(changes.begin(), changes.end(), [&](const auto& c) { return c.key == key; });
      return saved_config.empty() || change == changes.end()
                 ? std::string()
                 : fmt::format(" (the checkpoint was written with {} {}; this job has {})", key, change->first,
                               change->second);
    };
    // "; the checkpoint's model differs: KEY: A -> B, ..." (or "").
    const auto model_changes = [&] {
      std::vector<std::string> listed;
      for (const auto& change : changes) {
        if (change.key.starts_with("model.")) listed.push_back(fmt::format("{}: {} -> {}", change.key, change.first, change.second));
      }
      return listed.empty() ? std::string() : fmt::format("; the checkpoint's model differs: {}", fmt::join(listed, ", "));
    };
    // A checkpoint that does not fit because this job's config differs from the one that wrote it
    // is a configuration error (exit status 2: a restart would only fail alike); without such a
    // difference to explain it, the checkpoint's data is at fault.
    const auto refuse = [](std::string message, const std::string& config_difference) -> void {
      if (!config_difference.empty()) throw ConfigError(message + config_difference);
      throw DataError(std::move(message));
    };
    try {
      restore_by_name(part("model"), model_tensors(), "model file", where);
    } catch (const DataError& e) {
      refuse(e.what(), model_changes());
    }
    if (scope == RestoreScope::training) {
      try {
        optimizer->load_state(part("optimizer"));
      } catch (const DataError& e) {
        refuse(fmt::format("{}: {}", where, e.what()), saved_unlike_this("optimizer.type"));
      }
    }
    // Also for a model without tables: one that has none must refuse a checkpoint holding some,
    // as one with tables refuses those it lacks (it evaluated the dense part alone, silently).
    {
      // Sharded tables come back through the shards when the checkpoint holds one file per
      // shard of this job; otherwise (another shard count, or this job keeps the table in a
      // store of its own) their rows are read from the shard files and routed like any rows.
      // Evaluating under another sparse optimiser: the stores take each row with state of this
      // job's rule (fresh, as for a new row; evaluation never reads it), so the rows go through
      // the workers, not from the shards' own files, which hold the other rule's state.
      // Any setting may change the state's layout (sgd's momentum adds planes), and a checkpoint
      // without its config says nothing: then too.
      const bool fresh_state =
          scope == RestoreScope::weights &&
          (saved_config.empty() || std::any_of(changes.begin(), changes.end(), [](const auto& change) {
             return change.key.starts_with("sparse_optimizer.");
           }));
      std::map<std::string, NamedTensors> tables;
      if (checkpoint.files.count("embeddings")) tables = group_by_table(part("embeddings"));
      // The tables whose rows are in the shards' files: as the checkpoint records them, or (a
      // checkpoint from before it did) every table of this job not in the embeddings file.
      std::set<std::string> saved_sharded;
      if (checkpoint.state.contains("sharded_tables")) {
        for (const auto& name : checkpoint.state.at("sharded_tables")) saved_sharded.insert(name.get<std::string>());
      } else if (!checkpoint.external.empty()) {
        for (const auto& [name, store] : stores) {
          if (!tables.count(name)) saved_sharded.insert(name);
        }
      }
      // The shards load their own files only where those hold exactly this job's sharded
      // tables, one file per shard: a table that moved between the ring and the shards (with
      // the shard count unchanged) would otherwise start afresh, or come back as the rows a
      // shard file still held from before it moved.
      std::set<std::string> now_sharded;
      for (const auto& [name, store] : remote) now_sharded.insert(name);
      bool shard_files = !remote.empty() && group != nullptr && !fresh_state && saved_sharded == now_sharded;
      for (int k = 0; shard_files && k < options.cluster.servers; ++k) {
        shard_files = checkpoint.external.count(ps::shard_checkpoint_name(k, options.cluster.servers)) > 0;
      }
      shard_files = shard_files && static_cast<int>(checkpoint.external.size()) == options.cluster.servers;
      if (!checkpoint.external.empty()) {
        bool needed = false;
        for (const auto& [name, store] : stores) {
          // Routed rows of a sharded table are loaded by worker 0 alone (below): the others need
          // not read a table that may not fit them, nor any shard file for a table the
          // embeddings file holds.
          const bool sharded = remote.count(name) > 0;
          const bool loads_here = !(shard_files && sharded) && (!sharded || leader());
          needed = needed || (loads_here && !tables.count(name) && saved_sharded.count(name));
        }
        if (needed) {
          std::vector<NamedTensors> shards;
          for (const auto& [file, path] : checkpoint.external) shards.push_back(io::read_safetensors(path.string()).tensors);
          for (auto& [table, rows] : group_by_table(concat_shard_rows(shards))) {
            // Only tables that were sharded when the checkpoint was written: a shard file may
            // still hold rows of a table since moved to the ring (the embeddings file has it).
            if (saved_sharded.count(table)) tables.emplace(table, std::move(rows));
          }
        }
      }
      std::vector<std::string> dropped;  // tables the checkpoint has and this model does not
      for (const auto& [name, rows] : tables) {
        if (!stores.count(name)) dropped.push_back(name);
      }
      for (const auto& name : saved_sharded) {
        if (!stores.count(name) && !tables.count(name)) dropped.push_back(name);
      }
      if (!dropped.empty()) {
        refuse(fmt::format("{}: the checkpoint holds rows of table(s) this model does not have: {}", where,
                           fmt::join(dropped, ", ")),
               model_changes());
      }
      for (const auto& [name, store] : stores) {
        const bool sharded = remote.count(name) > 0;
        if (sharded && shard_files) continue;  // the shards load their own files, below
        // A sharded table is loaded into the shards once, by worker 0.
        if (sharded && !leader()) continue;
        auto it = tables.find(name);
        if (it == tables.end()) {
          throw DataError(fmt::format("{}: the checkpoint has no rows of table '{}'", where, name));
        }
        try {
          store->load_rows(fresh_state ? with_fresh_state(name, it->second, store->spec().dim) : it->second);
        } catch (const Error& e) {
          // Usually the optimiser state's layout: say which setting changed it.
          std::vector<std::string> sparse_changes;
          for (const auto& change : changes) {
            if (change.key.starts_with("sparse_optimizer.")) {
              sparse_changes.push_back(fmt::format("{}: {} -> {}", change.key, change.first, change.second));
            }
          }
          refuse(fmt::format("{}: the rows of table '{}' do not fit this job's table: {}", where, name, e.what()),
                 sparse_changes.empty() ? std::string()
                                        : fmt::format(" (the checkpoint was written with another sparse "
                                                      "optimiser: {}; keep its settings to resume, or "
                                                      "--eval, which takes any)",
                                                      fmt::join(sparse_changes, ", ")));
        }
      }
      if (!remote.empty() && shard_files && leader()) group->ps_client()->load_checkpoint(where);
      if (!remote.empty() && multi_worker()) group->barrier();
    }
    if (scope == RestoreScope::training && checkpoint.state.contains("early_stopping")) {
      try {
        early_stopping.restore(checkpoint.state.at("early_stopping"));
      } catch (const DataError& e) {
        throw DataError(fmt::format("{}: {}", where, e.what()));
      }
    }
    // fp16's loss scale continues where it was (a checkpoint of another precision has none: the
    // scale then starts afresh).
    if (loss_scaler && checkpoint.state.contains("loss_scale")) {
      const nlohmann::json& scale = checkpoint.state.at("loss_scale");
      loss_scaler->restore(scale.at("scale").get<double>(), scale.at("clean_steps").get<std::int64_t>());
    }
    // (Texts that differ in form only, e.g. an older program's key order, are no difference.)
    // An evaluation takes the weights under any run name, folder, schedule, cluster, optimiser or
    // training data: only the model, the test data and the precision bear on what it measures.
    auto noted = changes;
    if (scope == RestoreScope::weights) {
      std::erase_if(noted, [](const auto& change) {
        return !change.key.starts_with("model.") && !change.key.starts_with("data.test.") &&
               change.key != "job.precision";
      });
    }
    if (saved_config.empty() || !noted.empty()) {
      log->warn("{}: the checkpoint was written with a different configuration ({}); continuing with "
                "the current one", where,
                saved_config.empty() ? "it records none" : config::format_differences(noted));
    }
    return {checkpoint.state.at("epoch").get<std::int64_t>(),
            checkpoint.state.at("batch").get<std::int64_t>()};
  }

  // The batch of `epoch` where this job continues from `checkpoint` (saved at `batch`). Step s
  // of a job reads positions [s W B, (s + 1) W B) of the epoch's order whatever W (workers) and
  // B (batch size) are, so the position the checkpoint recorded carries over to this job's W
  // and B where it falls on one of its steps (checkpoints without it: the saved batch).
  std::int64_t resume_batch(const Checkpoint& checkpoint, std::int64_t epoch, std::int64_t batch,
                            const std::string& where) const {
    if (!checkpoint.state.contains("examples")) {
      // A checkpoint from before positions were kept in examples: its batch is this job's only
      // where it starts one of this job's steps.
      if (batch % micro_batches != 0) {
        throw ConfigError(fmt::format("{}: the checkpoint stopped at batch {} of epoch {}, which does not start a step "
                                      "of train.gradient_accumulation_steps {}; resume with a count that divides it",
                                      where, batch, epoch + 1, micro_batches));
      }
      return batch;
    }
    const std::int64_t examples = checkpoint.state.at("examples").get<std::int64_t>();
    const std::int64_t per_step = options.data.batch_size * workers() * micro_batches;
    // At or past the end of this job's epoch (which drops a different last batch): complete.
    if (examples >= steps_per_epoch * per_step) return epoch_batches();
    if (examples > 0 && checkpoint.state.contains("data_order") &&
        !same_order(checkpoint.state.at("data_order"), data_order())) {
      // The position counts examples of the saved epoch's order; another order makes the rest
      // of this epoch something else than the rest of that one.
      log->warn("{}: the checkpoint stopped {} examples into epoch {} of an order from {}; this job's order "
                "comes from {}: the rest of this epoch will repeat some of the saved epoch's examples and "
                "skip others (resume from an epoch boundary, or with the same data, seed and shuffle, to "
                "avoid it)",
                where, examples, epoch + 1, checkpoint.state.at("data_order").dump(), data_order().dump());
    }
    if (examples % per_step != 0) {
      throw ConfigError(fmt::format(
          "{}: the checkpoint stopped {} examples into epoch {}, which is not a whole number of steps of "
          "{}; resume with a global batch that divides it",
          where, examples, epoch + 1, global_batch_terms()));
    }
    return examples / per_step * micro_batches;
  }
};

Trainer::Trainer(const JobOptions& options, std::shared_ptr<ProcessGroup> group)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.options = options;
  s.group = std::move(group);
  s.micro_batches = static_cast<int>(options.train.gradient_accumulation_steps);
  s.early_stopping = EarlyStopping(options.train.early_stopping, options.train.checkpoint.keep_best);
  if (options.job.threads > 0) omp_set_num_threads(options.job.threads);
  apply_float_mode(options);  // before the loader and fusion threads start: they inherit it
  if (s.rank() == 0) warn_unused_settings(options);

  s.train_data = data::make_dataset(options.data.train, data::DatasetContext{"train", options.job.seed});
  s.test_data = data::make_dataset(options.data.test, data::DatasetContext{"test", options.job.seed});
  check_splits_agree(options.data, s.train_data->spec(), s.test_data->spec());
  if (const auto& stopping = options.train.early_stopping; s.early_stopping.tracking()) {
    if (!options.train.eval_each_epoch && options.train.eval_every_steps == 0) {
      throw ConfigError(fmt::format("{} watches the test evaluations, and this job has none: set "
                                    "train.eval_each_epoch: true or train.eval_every_steps",
                                    stopping.patience > 0
                                        ? fmt::format("train.early_stopping.patience: {}", stopping.patience)
                                        : std::string("train.checkpoint.keep_best: true")));
    }
    if ((stopping.metric == "auc" || stopping.metric == "log_loss") && s.test_data->spec().task != Task::binary) {
      throw ConfigError(fmt::format("train.early_stopping.metric: {} is measured for binary labels; this job's test "
                                    "split has {} classes: watch loss or accuracy",
                                    stopping.metric, s.test_data->spec().num_classes));
    }
  }

  const StepPlan steps = plan_steps(options, *s.train_data, s.rank(), s.workers());
  s.steps_per_epoch = steps.per_epoch;
  if (s.group && s.multi_worker()) {
    // Workers that read different files (a relative path resolved elsewhere, a stale copy, a
    // pattern matching other files on another host) would shard different orders, or train
    // different step counts and wait for each other.
    s.group->check_worker_agreement(
        "data size (data.train, data.test)",
        fmt::format("train: {} examples, {} steps per epoch\ntest: {} examples\n", s.train_data->size(),
                    s.steps_per_epoch, s.test_data->size()));
    s.group->check_worker_agreement("data file list (data.train, data.test)", data_files_listing(options.data));
  }
  s.total_steps = steps.total;
  if (s.total_steps == 0) throw ConfigError(no_full_batch_error(options, s.train_data->size(), s.workers()));

  models::ModelContext context;
  context.input = s.train_data->spec();
  context.seed = options.job.seed;
  const ClusterOptions& cluster = options.cluster;
  if (s.multi_worker() && cluster.sync_batch_norm) {
    context.cross_replica_sum = [group = s.group.get()](std::span<double> values) { group->sum(values); };
  }

  // Auto placement of sparse tables with parameter servers: measure over a few batches what
  // each table touches. The same batches on every worker (the first of the epoch's order, read
  // as one worker would), so all decide alike: each worker's own shard of them could put a
  // table near the memory bound on the ring on one worker and on the servers on another.
  std::map<std::string, TableProbe> probes;
  if (s.group && cluster.servers > 0) {
    data::Loader shared_batches(s.train_data, loader_options(options, true), /*rank=*/0, /*world_size=*/1);
    // A replica's growth is judged over the batches each worker reads: with gradient
    // accumulation, K a step. (Its per-step costs scale alike on the ring and the servers.)
    probes = probe_tables(options.model, context, options.sparse_optimizer, cluster, shared_batches,
                          s.total_steps * s.micro_batches);
  }

  // Each table's store: local with one process; else as placed (replicated or sharded).
  context.embedding_stores = [&s, &probes](const EmbeddingTableSpec& spec) -> std::shared_ptr<EmbeddingStore> {
    if (s.stores.count(spec.name)) {
      throw InternalError(fmt::format("embedding table '{}' requested twice", spec.name));
    }
    const JobOptions& o = s.options;
    std::shared_ptr<EmbeddingStore> store;
    if (!s.group) {
      store = std::make_shared<LocalEmbeddingStore>(spec, o.sparse_optimizer, worker_store_options());
    } else {
      TableProbe probe;
      probe.dim = spec.dim;
      if (auto it = probes.find(spec.name); it != probes.end()) probe = it->second;
      PlacementDecision decision = place_sparse(o.cluster, spec.name, probe);
      s.sparse_placement[spec.name] = decision.choice;
      s.placement.push_back(decision);
      if (decision.choice == Placement::ps) {
        ps::TableConfig config;
        config.spec = spec;
        config.optimizer = o.sparse_optimizer;
        config.options.consistency = o.cluster.ps.consistency;
        config.options.staleness = o.cluster.ps.staleness;
        config.options.num_workers = s.workers();
        config.options.min_count = o.cluster.ps.min_count;
        config.options.capacity_rows = o.cluster.ps.capacity_rows;
        // A sync table's cache serves nothing (a step takes only that step's rows; the start-up
        // warning says so): none is kept, so its copies cost nothing and its size check cannot
        // fail a job over a setting with no effect.
        config.options.cache_rows = o.cluster.ps.consistency == "sync" ? 0 : o.cluster.ps.cache_rows;
        config.options.cache_staleness = o.cluster.ps.cache_staleness;
        std::shared_ptr<ps::RemoteEmbeddingStore> remote;
        try {
          remote = std::make_shared<ps::RemoteEmbeddingStore>(s.group->ps_client(), config);
        } catch (const ConfigError& e) {
          throw ConfigError(fmt::format("cluster.ps: {}", e.what()));  // the options' section
        }
        s.remote[spec.name] = remote.get();
        store = remote;
      } else if (s.multi_worker()) {
        auto replica = std::make_shared<ReplicatedEmbeddingStore>(spec, o.sparse_optimizer, *s.group,
                                                                  worker_store_options());
        s.replicated.push_back(replica.get());
        store = replica;
      } else {
        store = std::make_shared<LocalEmbeddingStore>(spec, o.sparse_optimizer, worker_store_options());
      }
    }
    s.stores.emplace(spec.name, store);
    return store;
  };
  if (options.job.precision != "fp32" && Device::parse(options.job.device)->is_cpu()) {
    throw ConfigError(fmt::format("job.precision: {} is mixed precision on a GPU; set job.device: cuda "
                                  "(the CPU trains in fp32)", options.job.precision));
  }
  s.model = models::make_model(options.model, context);
  s.device = job_device(options, s.group ? s.group->role().local_rank : 0);
  if (!s.device.is_cpu()) {
    if (s.multi_worker() && options.cluster.sync_batch_norm) {
      throw ConfigError(fmt::format("cluster.sync_batch_norm: not on a device yet (job.device: {}); set false",
                                    options.job.device));
    }
    if (const std::string& type = options.optimizer.type; type != "sgd" && type != "adam" && type != "adamw") {
      throw ConfigError(fmt::format("optimizer.type: {} runs on the CPU only; on {} use sgd, adam or adamw",
                                    type, s.device.str()));
    }
    try {
      (void)device_ops(s.device);
    } catch (const Error& e) {
      throw ConfigError(fmt::format("job.device: {}", e.what()));
    }
    ActivationFormat format;
    if (options.job.precision != "fp32") {
      format.dtype = options.job.precision == "bf16" ? DType::bf16 : DType::f16;
      format.channels_last = true;  // the Tensor Cores' layout: cuDNN's fast kernels take NHWC
    }
    s.model->to(s.device, format);
    if (options.job.precision == "fp16") {
      // fp16 keeps 5 exponent bits: small gradients flush to zero unless the loss is scaled.
      s.loss_scaler.emplace();
      s.model->set_loss_scale(s.loss_scaler->scale());
    }
  }
  for (Parameter* p : s.model->parameters()) {
    if (p->kind() == ParamKind::dense) {
      s.dense_params.push_back(p);
      if (s.group) {
        s.placement.push_back(place_dense(cluster, p->name(), p->value().shape().str(),
                                          p->value().numel() * static_cast<std::int64_t>(dtype_size(p->value().dtype()))));
      }
      continue;
    }
    auto it = s.stores.find(p->name());
    if (it == s.stores.end()) {
      throw InternalError(fmt::format("sparse parameter '{}' has no embedding store of that name",
                                      p->name()));
    }
    EmbeddingStore* store = it->second.get();
    // Tables on the shards push without waiting; the step waits for all of them after backward.
    auto remote = s.remote.find(p->name());
    ps::RemoteEmbeddingStore* remote_store = remote == s.remote.end() ? nullptr : remote->second;
    // Gradient accumulation: the rows of the step's micro-batches, pushed once, on the last.
    auto pending = std::make_shared<SparseRowAccumulator>(store->spec().dim);
    p->add_grad_ready_hook([&s, store, remote_store, pending](Parameter& param) {
      SparseGrad& grad = param.sparse_grad();
      bool skip_rows = false;
      if (!all_finite(grad.rows)) {
        if (s.options.train.non_finite == "stop") {
          throw Error(fmt::format("the gradient of embedding table '{}' is not finite (NaN or Inf); "
                                  "lower the learning rates or check the data, or set "
                                  "train.non_finite: skip", param.name()));
        }
        // Skipped: this worker pushes no rows for the table this step. Still a push, which
        // sync tables and replicated ones count per worker and step. (Zero rows would still
        // move Adam's moments and row steps, and an FTRL row's state.)
        if (s.non_finite_sparse.empty()) s.non_finite_sparse = param.name();
        skip_rows = true;
      }
      std::span<const std::int64_t> ids = skip_rows ? std::span<const std::int64_t>() : std::span(grad.ids);
      const float* rows = grad.rows.data<float>();
      if (s.micro_batches > 1) {
        // A table whose rows were not finite in one of the micro-batches pushes none this step.
        if (skip_rows) {
          pending->skip();
        } else {
          pending->add(ids, rows);
        }
        if (s.micro_batch + 1 < s.micro_batches) return;
        const SparseRowAccumulator::StepRows step_rows = pending->finish(s.micro_batches);
        ids = step_rows.ids;
        rows = step_rows.rows;
      }
      if (remote_store != nullptr) {
        const auto start = Clock::now();
        remote_store->push_async(ids, rows, s.sparse_lr);
        s.comm_wait_seconds += seconds_since(start);
      } else {
        // A worker's own table (local, or a replica exchanged after backward): applying the rows
        // is the sparse optimiser's work, not communication, with one worker or many.
        store->push(ids, rows, s.sparse_lr);
      }
    });
    s.sparse_params.push_back(p);
  }
  {
    std::vector<std::string> names;
    for (Parameter* p : s.model->parameters()) names.push_back(p->name());
    std::set<std::string> sparse_names;
    for (Parameter* p : s.sparse_params) sparse_names.insert(p->name());
    check_placement_rules(cluster, names, sparse_names);  // a rule that applies to nothing is a typo
  }
  // Before the all-reduce (below) subscribes: the accumulator's hooks must run first.
  if (s.micro_batches > 1) s.dense_accumulator = std::make_unique<DenseGradAccumulator>(s.dense_params, s.micro_batches);
  s.optimizer = std::make_unique<optim::Optimizer>(options.optimizer, s.dense_params);

  if (s.group) {
    std::string listing;
    for (const auto& d : s.placement) listing += fmt::format("{} {} {}\n", d.name, d.shape, placement_name(d.choice));
    s.group->check_worker_agreement("parameter list and placement", listing);
    if (s.leader()) {
      s.log->info("placement of {} tensors:\n{}", s.placement.size(), format_placement(s.placement));
      // The shards are running by now (the launcher started them with the workers): say once
      // that they idle, rather than let their processes pass for part of the job's work.
      if (const std::string idle = idle_servers_warning(cluster, s.placement, options.model.type); !idle.empty()) {
        s.log->warn("{}", idle);
      }
    }
    if (s.multi_worker() && !s.dense_params.empty()) {
      // Gradients become ready in reverse forward order.
      std::vector<Parameter*> ready_order(s.dense_params.rbegin(), s.dense_params.rend());
      const bool on_devices = use_device_collectives(options, s.group->role(), s.device, s.dense_params);
      // Mixed choices would meet as an NCCL init timeout or a plan mismatch: say it plainly.
      s.group->check_worker_agreement("dense gradient path (cluster.ring.device_collectives)",
                                      on_devices ? "on the devices\n" : "through host memory\n");
      s.fuser = on_devices ? s.make_device_fuser(ready_order) : s.make_host_fuser(ready_order);
    }
  }

  if (s.leader()) {
    std::vector<std::string> ps_tables;
    std::int64_t job_steps = s.total_steps;
    int job_workers = s.workers();
    for (const auto& [name, table] : s.remote) ps_tables.push_back(name);
    // A dry run of a distributed job is one process: it speaks for the job's workers.
    if (!s.group) job_workers = cluster.workers;
    if (!s.group && cluster.servers > 0) {
      // Their steps, and the tables a rule puts on the servers (the plan refuses drop_last false
      // itself). Auto placement decides from the workers' first batches: the job warns of those.
      for (const auto& [name, store] : s.stores) {
        if (checked_rule_for(cluster, name) == "ps") ps_tables.push_back(name);
      }
      job_steps = options.data.drop_last || job_workers == 1
                      ? plan_steps(options, *s.train_data, 0, job_workers).total : 0;
    }
    warn_defeated_settings(options, *s.model, ps_tables, job_steps, job_workers);
  }

  s.schedule = make_schedule(options.optimizer, s.total_steps, "optimizer");
  s.sparse_schedule = make_schedule(options.sparse_optimizer, s.total_steps, "sparse_optimizer");
  s.run_path = std::filesystem::path(options.job.run_dir) / options.job.name;
}

Trainer::~Trainer() = default;

void apply_float_mode(const JobOptions& options) {
  if (!util::flush_denormals(options.job.flush_denormals) && options.job.flush_denormals) {
    log::get("trainer")->warn("job.flush_denormals: this CPU has no flush-to-zero mode; subnormal floats stay "
                              "exact (and slow)");
  }
}

std::vector<std::pair<std::string, Tensor>> Trainer::model_tensors() const {
  return on_host(state_->model_tensors());
}

models::Model& Trainer::model() { return *state_->model; }

std::vector<std::pair<std::string, Tensor>> Trainer::embedding_rows() const {
  return state_->embedding_rows();
}

void Trainer::describe(std::ostream& out) const {
  const State& s = *state_;
  if (!s.group && s.options.cluster.distributed()) {
    describe_distributed(out);
    return;
  }
  out << fmt::format("data: {} training and {} test examples, batch {}{} -> {} steps per epoch, "
                     "{} steps in all\n",
                     s.train_data->size(), s.test_data->size(), s.options.data.batch_size,
                     micro_batches_text(s.options), s.steps_per_epoch, s.total_steps);
  out << fmt::format("model: {}, example shape {}\n", s.options.model.type,
                     s.train_data->spec().example_shape.str());
  if (s.group) {
    out << fmt::format("cluster: {} workers, {} parameter-server shards\n", s.workers(),
                       s.options.cluster.servers);
    out << format_placement(s.placement);
    return;
  }
  out << fmt::format("{:<32} {:>18} {:>12}  {:<6} {}\n", "parameter", "shape", "elements", "kind",
                     "synchronisation");
  std::int64_t total = 0;
  for (Parameter* p : s.dense_params) {
    total += p->value().numel();
    out << fmt::format("{:<32} {:>18} {:>12}  {:<6} {}\n", p->name(), p->value().shape().str(),
                       p->value().numel(), "dense", "local (1 process)");
  }
  out << fmt::format("{} dense parameters, {:.1f} MiB in f32\n", total, total * 4.0 / (1 << 20));
  for (const auto& [name, store] : s.stores) {
    out << fmt::format("{:<32} {:>18} {:>12}  {:<6} {}\n", name,
                       fmt::format("[ids, {}]", store->spec().dim), "on demand", "sparse",
                       fmt::format("local store, {} lr {}", s.options.sparse_optimizer.type,
                                   s.options.sparse_optimizer.lr));
  }
}

void Trainer::describe_distributed(std::ostream& out) const {
  const State& s = *state_;
  const JobOptions& o = s.options;
  const ClusterOptions& cluster = o.cluster;
  // The steps of the job's workers (each reads its shard), not of this single process; the
  // schedules are checked against them as the workers will.
  const StepPlan steps = plan_steps(o, *s.train_data, 0, cluster.workers);
  const std::int64_t steps_per_epoch = steps.per_epoch, total = steps.total;
  if (total == 0) throw ConfigError(no_full_batch_error(o, s.train_data->size(), cluster.workers));
  (void)make_schedule(o.optimizer, total, "optimizer");
  (void)make_schedule(o.sparse_optimizer, total, "sparse_optimizer");
  out << fmt::format("data: {} training and {} test examples, batch {} per worker{} x {} workers -> {} steps per "
                     "epoch, {} steps in all\n",
                     s.train_data->size(), s.test_data->size(), o.data.batch_size, micro_batches_text(o),
                     cluster.workers, steps_per_epoch, total);
  out << fmt::format("model: {}, example shape {}\n", o.model.type, s.train_data->spec().example_shape.str());
  out << fmt::format("cluster: {} workers, {} parameter-server shards (launcher: {})\n", cluster.workers,
                     cluster.servers, cluster.launcher);
  out << fmt::format("{:<32} {:>18} {:>12}  {:<6} {}\n", "parameter", "shape", "elements", "kind", "placement");
  for (Parameter* p : s.dense_params) {
    out << fmt::format("{:<32} {:>18} {:>12}  {:<6} {}\n", p->name(), p->value().shape().str(), p->value().numel(),
                       "dense", fmt::format("ring: all-reduced over {} workers", cluster.workers));
  }
  for (const auto& [name, store] : s.stores) {
    // Checked as the ranks check it at start: a dry run must not approve what they refuse.
    const std::string rule = checked_rule_for(cluster, name);
    std::string where;
    if (rule == "ps" || (rule == "auto" && cluster.servers > 0)) {
      where = rule == "ps" ? "ps (placement rule)" : "auto: ring or ps, decided at start from the first batches' rows";
    } else {
      where = rule == "ring" ? "ring (placement rule): replicated on every worker" : "ring: replicated (no servers)";
    }
    out << fmt::format("{:<32} {:>18} {:>12}  {:<6} {}\n", name, fmt::format("[ids, {}]", store->spec().dim),
                       "on demand", "sparse", where);
  }
}

EvalResult Trainer::evaluate() {
  State& s = *state_;
  s.average_buffers();
  // Scored on the rows as the shards hold them now, as a later --eval of this step's checkpoint
  // reads them (a worker's hot-row cache may serve rows up to cache_staleness steps old), and
  // without creating rows for ids only the test split has or counting the reads towards
  // admission or eviction, so training goes on as if no evaluation had run.
  struct ReadOnlyPulls {
    const std::map<std::string, std::shared_ptr<EmbeddingStore>>& stores;
    explicit ReadOnlyPulls(const std::map<std::string, std::shared_ptr<EmbeddingStore>>& s) : stores(s) {
      for (const auto& [name, store] : stores) store->set_read_only(true);
    }
    ~ReadOnlyPulls() {
      for (const auto& [name, store] : stores) store->set_read_only(false);
    }
  } read_only(s.stores);
  // Each worker evaluates its shard of the test split; the meters are merged on every worker,
  // so exact AUC is computed over the whole split.
  data::Loader loader(s.test_data, loader_options(s.options, false), s.rank(), s.workers());
  loader.start_epoch(0);
  MetricMeter meter(s.test_data->spec().task);
  while (auto batch = loader.next()) {
    const Tensor labels = batch->labels;
    move_batch(*batch, s.device, *s.model);
    double loss = s.model->forward(*batch, /*training=*/false);
    meter.add(loss, s.model->outputs().to(Device::cpu()), labels);
  }
  if (s.multi_worker()) {
    const auto all = s.group->allgather(meter.to_bytes());
    MetricMeter merged(meter.task());
    for (const auto& bytes : all) merged.merge(MetricMeter::from_bytes(meter.task(), bytes));
    meter = std::move(merged);
  }
  const bool binary = meter.task() == Task::binary;
  return EvalResult{meter.mean_loss(), meter.accuracy(), binary ? meter.auc() : NAN,
                    binary ? meter.log_loss() : NAN, meter.examples()};
}

EvalResult Trainer::evaluate_checkpoint(const std::string& directory) {
  State& s = *state_;
  CheckpointManager checkpoints(s.run_path, s.options.train.checkpoint.keep_last);
  const Checkpoint checkpoint = checkpoints.load(directory);
  s.restore(checkpoint, directory, State::RestoreScope::weights);
  s.broadcast_model();
  const EvalResult eval = evaluate();
  const bool binary = s.test_data->spec().task == Task::binary;
  if (s.leader()) {
    if (binary) {
      s.log->info("checkpoint {} (step {}): test loss {:.4f} auc {:.4f} log loss {:.4f} accuracy {:.4f} "
                  "({} examples)", directory, checkpoint.step, eval.loss, eval.auc, eval.log_loss,
                  eval.accuracy, eval.examples);
    } else {
      s.log->info("checkpoint {} (step {}): test loss {:.4f} accuracy {:.4f} ({} examples)", directory,
                  checkpoint.step, eval.loss, eval.accuracy, eval.examples);
    }
    const EvalRecordPlace place = eval_record_place(directory, s.run_path);
    const std::filesystem::path metrics_path = place.run / "metrics.jsonl";
    std::error_code ec;
    if (!place.checkpoint_run) std::filesystem::create_directories(place.run, ec);
    nlohmann::json record = {{"kind", "eval_checkpoint"}, {"checkpoint", directory},
                             {"step", checkpoint.step}, {"loss", eval.loss},
                             {"accuracy", eval.accuracy}, {"examples", eval.examples}};
    if (binary) {
      record["auc"] = eval.auc;
      record["log_loss"] = eval.log_loss;
    }
    // The result is logged above: a record that cannot be written costs a warning, not the result.
    // Many writers: the checkpoint's run may be training now, its leader appending to the file
    // (this job holds no lock on that folder), and a repair here could cut its record.
    try {
      s.metrics.open(metrics_path, MetricsLog::Writers::many);
      s.write_metrics(record);
      s.metrics.close();
      s.log->info("evaluation recorded in {} ({})", metrics_path.string(),
                  place.checkpoint_run ? "the checkpoint's run"
                                       : "this job's run folder: the checkpoint is not in a run's checkpoints folder");
    } catch (const IoError& e) {
      s.log->warn("the evaluation is not recorded in the metrics: {}", e.what());
    }
  }
  return eval;
}

TrainResult Trainer::run(const RunControl& control) {
  State& s = *state_;
  const JobOptions& o = s.options;
  std::error_code ec;
  std::filesystem::create_directories(s.run_path, ec);
  if (ec) throw IoError(fmt::format("cannot create the run folder {}: {}", s.run_path.string(), ec.message()));
  // The leader writes the folder's metrics and checkpoints: one job at a time.
  std::optional<RunFolderLock> run_lock;
  if (s.leader()) run_lock.emplace(s.run_path);
  CheckpointManager checkpoints(s.run_path, o.train.checkpoint.keep_last);
  // Before anything is written into the folder (config.yaml, metrics).
  prepare_run_folder(o, s.run_path, s.leader(), run_lock && run_lock->held());
  // Every worker has checked the folder (resume: never) and the leader has cleared it
  // (overwrite) before the leader writes this run's records or any worker its trace there.
  if (o.train.checkpoint.resume != "auto" && s.multi_worker()) s.group->barrier();
  if (s.leader()) {
    s.metrics.open(s.run_path / "metrics.jsonl");
    io::write_file_atomically(s.run_path / "config.yaml", resolved_yaml(o));
  }

  if (o.train.trace) {
    const auto dir = s.run_path / "trace";
    std::filesystem::create_directories(dir, ec);
    trace::start((dir / fmt::format("worker-{}.json", s.rank())).string(), s.rank(),
                 fmt::format("worker {}", s.rank()));
    trace::set_thread_name("training");
  }
  TrainResult result;
  std::int64_t step = 0, first_epoch = 0, first_batch = 0;
  std::string resumed_from;  // the checkpoint this run continues, if any
  if (o.train.checkpoint.resume == "auto") {
    // Worker 0 picks the checkpoint (the run folder must be shared by all workers); every
    // worker loads that one.
    std::optional<Checkpoint> latest;
    if (s.leader()) latest = checkpoints.load_latest();
    std::vector<double> chosen{latest ? static_cast<double>(latest->step) + 1 : 0.0};
    if (s.multi_worker()) s.group->sum(chosen);
    if (chosen[0] > 0) {
      const auto resume_step = static_cast<std::int64_t>(chosen[0]) - 1;
      if (!latest) latest = checkpoints.load(checkpoints.path_for(resume_step));
      const std::string where = checkpoints.path_for(latest->step).string();
      std::tie(first_epoch, first_batch) = s.restore(*latest, where);
      first_batch = s.resume_batch(*latest, first_epoch, first_batch, where);
      // Steps count this job's global batches: where another global batch resumes, the step
      // is where this job's own steps would be (the schedule, max_steps and the epochs' end
      // follow it). Fewer steps than the checkpoint's would number the coming checkpoints
      // below the ones in the folder, which resume: auto would then take for newer.
      step = first_epoch * s.steps_per_epoch + first_batch / s.micro_batches;
      if (step < latest->step) {
        throw ConfigError(fmt::format(
            "{}: step {} of the checkpoint's job is step {} of this one ({} is a larger global batch); its "
            "checkpoints would be numbered below the ones already in {}: resume with a global batch no larger "
            "than the checkpoint's",
            where, latest->step, step, s.global_batch_terms(), s.run_path.string()));
      }
      if (step != latest->step) s.log->info("step {} of the checkpoint's job is step {} of this one", latest->step, step);
      result.resumed_from_step = step;
      resumed_from = where;
      if (o.train.checkpoint.keep_best && s.early_stopping.best()) {
        if (std::filesystem::exists(checkpoints.path_for(s.early_stopping.best_step()))) {
          checkpoints.set_kept_step(s.early_stopping.best_step());
        } else {
          // The best was not saved (keep_best was off) or is gone: the next evaluation is the best.
          s.early_stopping.forget_best();
        }
      }
      s.log->info("resumed from {} (step {}, epoch {}, batch {}{})", where, step, first_epoch + 1, first_batch,
                  s.micro_batches > 1 ? fmt::format(": {} micro-batches a step", s.micro_batches) : std::string());
    } else if (const int restart = restart_attempt(); restart > 0 && s.leader()) {
      // The launcher restarts "from the newest checkpoint": say so when there is none.
      const auto& saving = o.train.checkpoint;
      s.log->warn("restart {}: no complete checkpoint in {}: training again from step 0{}", restart,
                  checkpoints.directory().string(),
                  saving.every_steps > 0 ? ""
                  : saving.at_end       ? " (train.checkpoint.every_steps is 0: only the end saves one)"
                                        : " (train.checkpoint.every_steps is 0 and at_end false: this job saves none)");
    }
  }
  const std::string trace_name = s.leader() && o.train.trace ? trace_file_name(s.run_path, step) : "";
  if (s.leader()) s.write_metrics(run_start_record(o, step, s.total_steps, resumed_from, trace_name));
  for (auto& [name, remote] : s.remote) remote->set_step(static_cast<std::uint64_t>(step));
  s.broadcast_model();

  const data::LoaderOptions train_loading = loader_options(o, true);
  if (o.data.prefetch_batches == data::kAutoPrefetch) {
    s.log->info("data.prefetch_batches -1: {}", train_loading.prefetch_batches == 0
                                                    ? "batches read on the training thread (this worker can keep one CPU busy only)"
                                                    : fmt::format("{} batches read ahead by a background thread",
                                                                  train_loading.prefetch_batches));
  }
  data::Loader loader(s.train_data, train_loading, s.rank(), s.workers());
  const Task task = s.train_data->spec().task;
  MetricMeter interval(task);
  MetricMeter step_meter(task);  // the step's micro-batches, merged into interval when the step is taken
  const auto start = Clock::now();
  auto interval_start = start;
  double eval_seconds = 0;
  const std::int64_t start_step = step;
  std::int64_t last_saved = step;
  const std::int64_t epochs = (s.total_steps + s.steps_per_epoch - 1) / s.steps_per_epoch;
  s.log->info("training {} for {} steps ({} epochs of {}), run folder {}", o.model.type,
              s.total_steps, epochs, s.steps_per_epoch, s.run_path.string());
  if (s.micro_batches > 1 && s.leader()) {
    const std::int64_t left_over = loader.batches_per_epoch() - s.epoch_batches();
    s.log->info("gradient accumulation: each step averages {} micro-batches of {} per worker: a global batch of "
                "{} ({}){}", s.micro_batches, o.data.batch_size,
                o.data.batch_size * s.workers() * s.micro_batches, s.global_batch_terms(),
                left_over > 0 ? fmt::format("; the last {} batch(es) of each epoch make no whole step and are "
                                            "not trained on", left_over)
                              : std::string());
  }
  if (step >= s.total_steps) {
    // A finished job run again, or a checkpoint past this config's end: say why nothing trains.
    s.log->warn("the checkpoint is at step {}, {} this job's {} steps (train.epochs {}, train.max_steps {}): "
                "nothing left to train; raise train.epochs or train.max_steps to train on", step,
                step == s.total_steps ? "the end of" : "past", s.total_steps, o.train.epochs, o.train.max_steps);
  }
  if (auto best = s.test_data->reference_auc()) {
    s.log->info("the test split comes from a known teacher: best achievable AUC {:.4f}", *best);
  }
  if (s.early_stopping.stopped()) {
    s.log->warn("the checkpoint's job stopped early ({}): nothing left to train; raise "
                "train.early_stopping.patience, or set it 0, to train on", s.early_stopping.describe());
    result.stopped_early = true;
  }

  // What this worker was doing, for errors from collectives and parameter servers, and
  // whether that was after `step` (metrics, checkpoint, evaluation) or during step + 1.
  const char* phase = "starting";
  // What backward does besides computing, for an error's phase: the dense gradients' all-reduce
  // and the row pushes start from its gradient hooks.
  // Named by what the forward waits on in this job (a silent shard or worker shows up here).
  const std::string forward_phase = [&] {
    std::vector<std::string> also;
    if (!s.remote.empty()) also.push_back("pulling rows from the parameter servers");
    if (s.multi_worker() && o.cluster.sync_batch_norm) also.push_back("summing batch-norm statistics");
    return also.empty() ? std::string("forward") : fmt::format("forward ({})", fmt::join(also, ", "));
  }();
  const std::string backward_phase = [&] {
    std::vector<std::string> also;
    if (s.fuser) also.push_back("all-reducing dense gradients as they become ready");
    if (!s.remote.empty()) also.push_back("pushing row gradients");
    return also.empty() ? std::string("backward") : fmt::format("backward ({})", fmt::join(also, ", "));
  }();
  bool after_step = false;
  double checkpoint_seconds = 0;
  auto save = [&](std::int64_t epoch, std::int64_t batch) {
    phase = "saving a checkpoint";
    // Checkpoints, like evaluation, are not training time: the progress lines' samples/s and
    // the summary leave them out.
    const auto save_start = Clock::now();
    struct Paused {
      Clock::time_point begin;
      Clock::time_point& interval_start;
      double& total;
      ~Paused() {
        interval_start += Clock::now() - begin;
        total += seconds_since(begin);
      }
    } paused{save_start, interval_start, checkpoint_seconds};
    // Every worker has finished the step, and the buffers agree.
    if (s.multi_worker()) s.group->barrier();
    s.average_buffers();
    last_saved = step;
    if (s.leader()) {
      trace::Span span("checkpoint", "save");
      auto dir = checkpoints.save(s.snapshot(step, epoch, batch));
      s.log->info("checkpoint at step {}: {}", step, dir.string());
    }
    // Every worker waits for the leader's save here, inside its pause: otherwise the others'
    // next collective waits for it and counts the save as communication (shares of step time
    // over 100% after checkpoints). Shards of async or bounded tables need it anyway: they
    // apply a push when it arrives (a sync shard waits for every worker's, the leader's
    // included), so the next step's pushes could land in the snapshot the save is writing, and
    // a job resumed from it would apply them twice.
    if (s.multi_worker()) s.group->barrier();
  };

  // One progress line and "train" record for the steps since the last (collective: every worker
  // calls it at the same step). `partial`: the job stops before the interval is full; the record
  // says so and how many steps it covers, so no trained step goes unrecorded.
  std::int64_t last_reported = step;
  ClipInterval interval_clip;  // train.clip_grad_norm since the last report (alike on every worker)
  auto report_interval = [&](std::int64_t epoch, double lr, bool partial) {
    const double elapsed = seconds_since(interval_start);
    const bool binary = task == Task::binary;
    // Loss and accuracy over all workers; AUC over worker 0's examples (exact AUC over
    // every worker needs every score: evaluation does that).
    std::vector<double> totals{interval.mean_loss() * static_cast<double>(interval.examples()),
                               interval.accuracy() * static_cast<double>(interval.examples()),
                               static_cast<double>(interval.examples()), s.comm_wait_seconds};
    if (s.multi_worker()) s.group->sum(totals);
    const double examples = std::max(totals[2], 1.0);
    const double mean_loss = totals[0] / examples;
    // Only the leader logs the AUC: the other workers skip its sort (51k scores at the
    // flights config's interval), which would only make them idle at the next collective.
    const double metric = binary ? (s.leader() ? interval.auc() : 0.0) : totals[1] / examples;
    const double rate = totals[2] / std::max(elapsed, 1e-9);
    const double comm_share = s.comm_wait_share(totals[3], elapsed);
    if (s.leader() && totals[2] == 0) {
      // Every step of the interval was skipped (non-finite, or fp16 overflow while the loss
      // scale settles): no loss or rate to report.
      s.log->info("epoch {}/{} step {}/{}: every step since the last line was skipped", epoch + 1, epochs, step,
                  s.total_steps);
    } else if (s.leader()) {
      s.log->info("epoch {}/{} step {}/{} loss {:.4f} {} {:.4f} lr {:.5f} samples/s {:.1f}{}{}{}",
                  epoch + 1, epochs, step, s.total_steps, mean_loss, binary ? "auc" : "acc",
                  metric, lr, rate,
                  s.group ? fmt::format(" comm wait {:.0f}%", 100 * comm_share) : std::string(),
                  interval_clip.describe(),
                  partial ? fmt::format(" (the last {} steps: the job stops here)", step - last_reported)
                          : std::string());
      nlohmann::json record = {{"kind", "train"}, {"step", step}, {"epoch", epoch + 1},
                               {"loss", mean_loss}, {binary ? "auc" : "accuracy", metric},
                               {"lr", lr}, {"samples_per_s", rate}, {"comm_wait_share", comm_share}};
      if (partial) {
        record["partial"] = true;
        record["interval_steps"] = step - last_reported;
      }
      interval_clip.add_to(record);
      s.write_metrics(record);
    }
    if (result.first_train_loss == 0) result.first_train_loss = mean_loss;
    result.last_train_loss = mean_loss;
    interval.reset();
    interval_clip = {};
    s.run_wait_seconds += s.comm_wait_seconds;
    s.comm_wait_seconds = 0;
    interval_start = Clock::now();
    last_reported = step;
  };
  // An evaluation on the test split, its progress line and "eval" record (collective: every
  // worker calls it at the same step). Not training time: the interval's start moves past it.
  // Returns whether early stopping says to stop here.
  auto evaluate_now = [&](std::int64_t epoch, bool epoch_end) -> bool {
    const auto eval_start = Clock::now();
    EvalResult eval;
    {
      phase = "evaluation";
      trace::Span span("eval", "evaluate");
      eval = evaluate();
    }
    const bool binary = task == Task::binary;
    const std::string when = epoch_end ? fmt::format("epoch {}/{}", epoch + 1, epochs)
                                       : fmt::format("step {}/{}", step, s.total_steps);
    if (!s.leader()) {
      // Only worker 0 reports.
    } else if (binary) {
      s.log->info("{} test loss {:.4f} auc {:.4f} log loss {:.4f} accuracy {:.4f} ({} examples)", when, eval.loss,
                  eval.auc, eval.log_loss, eval.accuracy, eval.examples);
    } else {
      s.log->info("{} test loss {:.4f} accuracy {:.4f} ({} examples)", when, eval.loss, eval.accuracy, eval.examples);
    }
    nlohmann::json record = {{"kind", "eval"}, {"step", step}, {"epoch", epoch + 1},
                             {"loss", eval.loss}, {"accuracy", eval.accuracy},
                             {"examples", eval.examples}};
    if (!epoch_end) record["within_epoch"] = true;
    if (binary) {
      record["auc"] = eval.auc;
      record["log_loss"] = eval.log_loss;
      if (auto best = s.test_data->reference_auc()) record["reference_auc"] = *best;
    }
    if (s.leader()) s.write_metrics(record);
    result.last_eval = eval;
    interval_start += Clock::now() - eval_start;
    eval_seconds += seconds_since(eval_start);
    if (!s.early_stopping.tracking()) return false;
    const std::string& watched = s.early_stopping.metric();
    const double value = watched == "loss"       ? eval.loss
                         : watched == "log_loss" ? eval.log_loss
                         : watched == "auc"      ? eval.auc
                                                 : eval.accuracy;
    return s.early_stopping.observe(value, step, /*may_stop=*/step < s.total_steps);
  };
  // Throughput after the run's first step (its start-up is not the job's speed): when it ended,
  // and the evaluation and checkpoint time paused before then.
  std::optional<Clock::time_point> steady_start;
  double paused_before_steady = 0;

  const std::optional<InjectedFault> kill_at = injected_fault(s.rank());
  const long slow_micros = slow_worker_micros(s.rank());  // AIACC_TEST_SLOW_WORKER
  const char* nan_env = std::getenv("AIACC_TEST_NAN_AT");
  const std::int64_t nan_at = nan_env ? std::atoll(nan_env) : -1;
  bool stopped = s.early_stopping.stopped();
  // Stop signals wait for the workers' next agreement (each may get one at another step, or only
  // some get one): all stop at the same step, its checkpoint taken.
  std::optional<StopSignals> stop_signals;
  if (o.train.checkpoint.on_signal) stop_signals.emplace();
  bool stop_announced = false;  // the user hears at once that the signal was taken
  try {
  for (std::int64_t epoch = first_epoch; epoch < epochs && step < s.total_steps && !stopped; ++epoch) {
    std::int64_t batch_index = epoch == first_epoch ? first_batch : 0;
    loader.start_epoch(epoch, batch_index);
    std::optional<Batch> prefetched;  // the next batch, read early to prefetch its rows
    // The epoch's batches that make whole steps (train.gradient_accumulation_steps per step).
    const std::int64_t epoch_batches = s.epoch_batches();
    // Reads the next batch early and starts pulling its parameter-server rows.
    auto prefetch_next_batch = [&] {
      phase = "prefetching the next batch's rows";
      trace::Span prefetch_span("data", "prefetch next batch");
      prefetched = loader.next();
      if (!prefetched) return;
      for (auto& [name, ids] : s.model->embedding_ids(*prefetched)) {
        if (auto table = s.remote.find(name); table != s.remote.end()) table->second->prefetch(ids);
      }
    };
    while (step < s.total_steps && batch_index < epoch_batches) {
      after_step = false;
      trace::Span step_span("step", fmt::format("step {}", step + 1));
      const double lr = s.schedule->lr_at(step);
      s.sparse_lr = s.sparse_schedule->lr_at(step);
      step_meter.reset();
      bool epoch_ended = false;
      for (int micro = 0; micro < s.micro_batches; ++micro) {
        s.micro_batch = micro;
        const bool last_micro = micro + 1 == s.micro_batches;
        std::optional<Batch> batch;
        if (prefetched) {
          batch = std::move(prefetched);
          prefetched.reset();
        } else {
          phase = "reading the next batch";
          trace::Span span("data", "next batch");
          batch = loader.next();
        }
        if (!batch && micro == 0) {
          epoch_ended = true;
          break;
        }
        if (!batch) {
          throw InternalError(fmt::format("the training data ran out at micro-batch {} of step {} (batch {} of {} "
                                          "this epoch)", micro + 1, step + 1, batch_index + 1, epoch_batches));
        }
        if (nan_at == step + 1 && micro == 0 && batch->inputs.dtype() == DType::f32) {
          // Fault injection for tests (AIACC_TEST_NAN_AT=STEP): a batch of NaN features.
          std::fill(batch->inputs.data<float>(), batch->inputs.data<float>() + batch->inputs.numel(), NAN);
        }
        const Tensor labels = batch->labels;  // on the host, for the metrics
        move_batch(*batch, s.device, *s.model);
        double loss = 0;
        {
          phase = forward_phase.c_str();
          trace::Span span("compute", "forward");
          loss = s.model->forward(*batch, /*training=*/true);
        }
        // With fp16 loss scaling a non-finite loss (an activation beyond fp16's range) is an
        // overflow like any other: its step is skipped below and the scale backs off.
        if (!std::isfinite(loss) && o.train.non_finite == "stop" && !s.loss_scaler) {
          throw Error(fmt::format("the training loss became {} at step {}{} (epoch {}); lower "
                                  "optimizer.lr or check the data, or set train.non_finite: skip",
                                  loss, step + 1,
                                  s.micro_batches > 1 ? fmt::format(", micro-batch {} of {}", micro + 1, s.micro_batches)
                                                      : std::string(),
                                  epoch + 1));
        }
        // Only the last micro-batch's backward all-reduces (the fuser ignores gradients outside
        // a step) and pushes rows (the sparse hooks hold the others' back).
        if (last_micro && s.fuser) s.fuser->begin_step();
        if (s.dense_accumulator) s.dense_accumulator->begin_micro_batch(micro);
        if (s.loss_scaler) s.model->set_loss_scale(s.loss_scaler->scale());
        {
          phase = backward_phase.c_str();
          trace::Span span("compute", "backward");
          s.model->backward();
        }
        step_meter.add(loss, s.model->outputs().to(Device::cpu()), labels);
        ++batch_index;
        if (!last_micro) {
          // The next micro-batch's rows: nothing is pushed before the step's last backward, so
          // they are what its pull would get.
          if (!s.remote.empty()) prefetch_next_batch();
          continue;
        }
        if (s.dense_accumulator) s.dense_accumulator->finish_step();
        if (!s.remote.empty()) {
          phase = "pushing row gradients to the parameter servers";
          trace::Span span("wait", "row pushes");
          const auto push_start = Clock::now();
          for (auto& [name, table] : s.remote) table->wait_push();
          s.comm_wait_seconds += seconds_since(push_start);
          // Prefetch: read the next batch of this epoch now and start pulling its rows, which
          // then arrive while the dense gradients are all-reduced and the optimiser runs. (Only
          // after every push of this step was applied: a pull must see them.)
          if (batch_index < epoch_batches && step + 1 < s.total_steps) prefetch_next_batch();
        }
      }
      if (epoch_ended) break;
      if (slow_micros > 0) std::this_thread::sleep_for(std::chrono::microseconds(slow_micros));
      if (s.fuser) {
        phase = "all-reducing gradients";
        trace::Span span("wait", "wait for all-reduce");
        s.fuser->finish_step();
        if (!s.host_grads.empty()) {
          // host_grads holds the twins in ready order: the reverse of dense_params.
          for (std::size_t i = 0; i < s.host_grads.size(); ++i) {
            s.dense_params[s.dense_params.size() - 1 - i]->grad().copy_from(s.host_grads[i]->grad());
          }
        }
        s.comm_wait_seconds += s.fuser->last_exposed_seconds();
        s.run_allreduce_seconds += s.fuser->last_communication_seconds();
        s.run_allreduce_exposed_seconds += s.fuser->last_exposed_seconds();
      }
      // Replicated tables are exchanged after the dense buckets, not beside them: run at once,
      // the two exchanges' threads took turns spinning on a worker's core (Wide&Deep on flights,
      // one core per worker: E 0.78 -> 0.83 with this order, interleaved runs).
      if (!s.replicated.empty()) {
        phase = "exchanging replicated table rows";
        trace::Span span("wait", "replicated tables");
        // Only the exchange is communication: applying the rows is the sparse optimiser's work.
        s.comm_wait_seconds += ReplicatedEmbeddingStore::synchronize(s.replicated, *s.group);
      }
      // Non-finite gradients: the reduced dense gradients are identical on every worker, so
      // every worker takes the same decision.
      std::string bad_tensor = s.non_finite_sparse;
      s.non_finite_sparse.clear();
      bool overflowed = false;
      // Gradient accumulation leaves the step's sum over its micro-batches: their mean is taken
      // here, in the pass that unscales or checks them anyway.
      const float mean_factor = 1.0f / static_cast<float>(s.micro_batches);
      if (s.loss_scaler) {
        // Unscale every gradient and look for overflow in one pass.
        std::vector<std::pair<float*, std::int64_t>> grads;
        for (Parameter* p : s.dense_params) grads.emplace_back(p->grad().data<float>(), p->grad().numel());
        const std::int64_t bad = device_ops(s.device).multiply_and_check(
            s.device, grads, s.loss_scaler->inverse_scale() * mean_factor);
        const float scale_before = s.loss_scaler->scale();
        if (!s.loss_scaler->update(bad >= 0)) {
          overflowed = true;
          s.log->info("step {}: the fp16 gradient of '{}' overflowed at loss scale {}; step skipped, scale now {}",
                      step + 1, s.dense_params[static_cast<std::size_t>(bad)]->name(), scale_before,
                      s.loss_scaler->scale());
        }
      } else if (s.micro_batches > 1) {
        const std::int64_t bad = scale_gradients(s.dense_params, mean_factor);
        if (bad >= 0 && bad_tensor.empty()) bad_tensor = s.dense_params[static_cast<std::size_t>(bad)]->name();
      } else if (bad_tensor.empty()) {
        bad_tensor = first_nonfinite_grad(s.dense_params, s.device);
      }
      if (!bad_tensor.empty() && o.train.non_finite == "stop") {
        throw Error(fmt::format("the gradient of '{}' is not finite (NaN or Inf) at step {} (epoch {}); "
                                "lower the learning rate or check the data, or set train.non_finite: skip",
                                bad_tensor, step + 1, epoch + 1));
      }
      if (!bad_tensor.empty()) {
        ++s.skipped_steps;
        s.log->warn("step {} skipped: the gradient of '{}' is not finite (loss {}); {} steps skipped so far",
                    step + 1, bad_tensor, step_meter.mean_loss(), s.skipped_steps);
      } else if (!overflowed) {
        if (o.train.clip_grad_norm > 0) {
          phase = "clipping gradients";
          trace::Span span("compute", "clip gradients");
          // The gradients are the workers' average by now, the same bits on every worker, and
          // so are the norm and the decision.
          const ClipOutcome clip = clip_gradients(s.dense_params, o.train.clip_grad_norm);
          interval_clip.add(clip);
          result.last_grad_norm = clip.norm;
          result.clipped_steps += clip.clipped ? 1 : 0;
        }
        phase = "optimizer step";
        trace::Span span("compute", "optimizer");
        s.optimizer->step(lr);
      }
      if (bad_tensor.empty() && !overflowed) interval.merge(step_meter);
      ++step;
      after_step = true;
      phase = "summing the progress metrics";
      if (step == start_step + 1) {
        // The run's first step also starts the loader's threads, fills its first batch and
        // opens the collectives' connections (0.3-0.5 s on flights, against ~1 ms a step).
        steady_start = Clock::now();
        paused_before_steady = eval_seconds + checkpoint_seconds;
      }
      if (step % o.train.log_every_steps == 0 || step == s.total_steps) {
        report_interval(epoch, lr, false);
        if (s.leader()) s.warn_about_grown_replicas();
      }
      // The position after this step: the rest of this epoch, or the next epoch.
      const bool epoch_done = batch_index >= epoch_batches;
      const std::int64_t next_epoch = epoch_done ? epoch + 1 : epoch;
      const std::int64_t next_batch = epoch_done ? 0 : batch_index;
      // Evaluations (the epoch's, at its end or the job's last step; train.eval_every_steps), once
      // a step, before its checkpoint: the checkpoint keeps what early stopping made of them.
      const bool epoch_evaluation = o.train.eval_each_epoch && (epoch_done || step == s.total_steps);
      const bool step_evaluation = o.train.eval_every_steps > 0 && step % o.train.eval_every_steps == 0;
      bool stop_early = false;
      bool save_best = false;  // train.checkpoint.keep_best: this step's evaluation is the best so far
      if (epoch_evaluation || step_evaluation) {
        stop_early = evaluate_now(epoch, epoch_evaluation || epoch_done);
        if (stop_early && last_reported != step) report_interval(epoch, lr, true);
        save_best = o.train.checkpoint.keep_best && s.early_stopping.improved_last();
        if (save_best) checkpoints.set_kept_step(step);
      }
      const auto& every = o.train.checkpoint.every_steps;
      if ((every > 0 && step % every == 0) || (save_best && last_saved != step)) save(next_epoch, next_batch);
      // Fault injection for tests: AIACC_TEST_KILL_AT=RANK:STEP kills worker RANK right after
      // STEP (and its checkpoint), as a crash would; RANK:STEP:stop freezes it (SIGSTOP), as a
      // hung host or a cut link would: alive to the kernel, silent to its peers.
      if (kill_at && kill_at->step == step) {
        s.log->warn("AIACC_TEST_KILL_AT: {} this worker after step {}",
                    kill_at->signal == SIGSTOP ? "freezing" : kill_at->signal == SIGTERM ? "sending SIGTERM to" : "killing",
                    step);
        std::raise(kill_at->signal);
      }
      if (stop_signals && !stop_announced && stop_signals->received() != 0) {
        stop_announced = true;
        const std::int64_t check = o.train.checkpoint.signal_check_steps;
        s.log->warn("got signal {} ({}): stopping after step {} (the workers' next check) with a checkpoint; "
                    "a second signal a second or more later stops at once",
                    stop_signals->received(), strsignal(stop_signals->received()),
                    std::min(s.total_steps, (step + check - 1) / check * check));
      }
      // (The last step ends the job anyway, with its evaluation.)
      if (stop_signals && step % o.train.checkpoint.signal_check_steps == 0 && step < s.total_steps) {
        phase = "checking for a stop signal";
        if (const auto stop = s.agree_on_stop(stop_signals->received())) {
          result.stopped_by_signal = stop->signal;
          result.stopped_early = stop_early;  // both at this step: the checkpoint records it too
          if (last_reported != step) report_interval(epoch, lr, true);
          if (last_saved != step && (o.train.checkpoint.at_end || every > 0)) save(next_epoch, next_batch);
          if (s.leader()) {
            s.log->warn("stopped by signal {} ({}) on {} of {} workers{} after step {}{}; exiting with status {}",
                        result.stopped_by_signal, strsignal(result.stopped_by_signal), stop->workers, s.workers(),
                        stop->shard ? " and a parameter-server shard" : "", step,
                        last_saved == step ? fmt::format(" (checkpoint {}: train.checkpoint.resume: auto continues "
                                                         "from it)", checkpoints.path_for(step).string())
                                           : std::string(" (no checkpoint: this job saves none)"),
                        stopped_exit_status(result.stopped_by_signal));
          }
          stopped = true;
          break;
        }
      }
      if (control.stop_after_step > 0 && step >= control.stop_after_step) {
        if (last_reported != step) report_interval(epoch, lr, true);
        stopped = true;
        break;
      }
      if ((step == s.total_steps || stop_early) && o.train.checkpoint.at_end && last_saved != step) {
        save(next_epoch, next_batch);
      }
      if (stop_early) {
        result.stopped_early = true;
        if (s.leader()) {
          s.log->warn("early stopping: {}: stopping after step {} of {}{}", s.early_stopping.describe(), step,
                      s.total_steps,
                      last_saved == step ? fmt::format(" (checkpoint {})", checkpoints.path_for(step).string())
                                         : std::string(" (no checkpoint: train.checkpoint.at_end is false)"));
        }
        stopped = true;
        break;
      }
    }
  }
  } catch (const TimeoutError& e) {
    // The peer this rank waited for may itself wait for the silent rank: the others say whom.
    const std::string chain = s.group ? s.group->explain_timeout(e, phase) : "";
    throw TimeoutError(fmt::format("worker {} {} step {}, {}: {}{}", s.rank(), after_step ? "after" : "at",
                                   after_step ? step : step + 1, phase, e.what(), chain));
  } catch (const CommError& e) {
    throw CommError(fmt::format("worker {} {} step {}, {}: {}", s.rank(), after_step ? "after" : "at",
                                after_step ? step : step + 1, phase, e.what()));
  }
  result.steps = step;
  if (s.loss_scaler) {
    result.loss_scale = s.loss_scaler->scale();
    result.overflow_steps = s.loss_scaler->skipped_steps();
    s.log->info("fp16 loss scale {} at the end; {} steps skipped for overflow", result.loss_scale,
                result.overflow_steps);
  }
  measure_throughput(result, step - start_step, start, steady_start,
                     {eval_seconds + checkpoint_seconds, paused_before_steady},
                     o.data.batch_size * s.workers() * s.micro_batches);
  if (s.leader() && s.tuner != nullptr && !s.tuner->done()) {
    s.log->warn("auto-tuning did not finish: this run had {} steps of the {} it takes; the last setting tried "
                "was kept (cluster.ring.auto_tune)", step - start_step, s.tuner->steps());
  }
  if (s.leader() && !s.stores.empty()) {
    std::vector<std::string> rows;
    for (const auto& [name, store] : s.stores) rows.push_back(fmt::format("{} {}", name, store->num_rows()));
    s.log->info("embedding tables (rows): {}", fmt::join(rows, ", "));
  }
  std::string summary;
  if (result.last_eval) {
    summary = task == Task::binary ? fmt::format(", test auc {:.4f}", result.last_eval->auc)
                                   : fmt::format(", test accuracy {:.4f}", result.last_eval->accuracy);
  }
  if (o.train.trace) {
    trace::stop();
    if (s.multi_worker()) s.group->barrier();  // every worker's file is written
    if (s.leader()) {
      std::vector<std::string> files;
      for (int w = 0; w < s.workers(); ++w) {
        files.push_back((s.run_path / "trace" / fmt::format("worker-{}.json", w)).string());
      }
      const auto merged = (s.run_path / trace_name).string();
      const auto events = trace::merge_files(files, merged);
      s.log->info("trace of {} workers ({} events): {} (open in https://ui.perfetto.dev)",
                  s.workers(), events, merged);
    }
  }
  if (s.leader()) {
    s.log->info("{}: {} steps in {:.1f} s of training, {}{}", stopped ? "stopped" : "done", step - start_step,
                result.seconds, describe_throughput(result), summary);
  }
  if (s.group) {
    std::vector<double> totals{s.run_wait_seconds + s.comm_wait_seconds, s.run_allreduce_seconds,
                               s.run_allreduce_exposed_seconds};
    if (s.multi_worker()) s.group->sum(totals);
    result.comm_wait_share = s.comm_wait_share(totals[0], result.seconds);
    // Exposed time also holds waiting for a slower worker, so it can exceed the collectives'
    // own time: the share is clamped to [0, 1].
    result.allreduce_hidden_share = totals[1] > 0 ? std::clamp(1.0 - totals[2] / totals[1], 0.0, 1.0) : 0.0;
  }
  std::optional<WorkerPace> pace;
  if (s.multi_worker()) {
    // One slot per worker, summed: every worker learns every worker's pace.
    std::vector<double> ms(static_cast<std::size_t>(s.workers()), 0.0);
    const auto steps_run = static_cast<double>(std::max<std::int64_t>(step - start_step, 1));
    const double busy = std::max(0.0, result.seconds - (s.run_wait_seconds + s.comm_wait_seconds));
    ms[static_cast<std::size_t>(s.rank())] = 1e3 * busy / steps_run;
    s.group->sum(ms);
    pace = worker_pace(std::move(ms));
  }
  if (pace && s.leader()) {
    if (pace->spread() >= kStragglerSpread) {
      s.log->warn("{}: every step waited for it (a slower core or host, or more work on it: its data or tables)",
                  pace->describe());
    } else {
      s.log->info("{}", pace->describe());
    }
  }
  const std::optional<PsCacheReport> cache_report =
      ps_cache_report(s.remote, s.multi_worker() ? s.group.get() : nullptr, s.workers());
  if (cache_report && s.leader()) {
    s.log->info("hot-row caches of parameter-server rows ({} tables x {} workers, cluster.ps.cache_rows {}): {}",
                cache_report->tables, cache_report->workers, o.cluster.ps.cache_rows, cache_report->describe());
  }
  if (s.leader()) {
    nlohmann::json record = {{"kind", "summary"}, {"workers", s.workers()}, {"steps", step - start_step},
                             {"seconds", result.seconds}, {"samples_per_s", result.samples_per_second},
                             {"warmup_steps", result.warmup_steps}, {"warmup_seconds", result.warmup_seconds},
                             {"samples_per_s_all_steps", result.samples_per_second_all_steps},
                             {"comm_wait_share", result.comm_wait_share},
                             {"allreduce_hidden_share", result.allreduce_hidden_share}};
    if (s.group) record["allreduce_hidden_behind"] = s.allreduce_hidden_behind();
    if (cache_report) record["ps_cache"] = cache_report->to_json();
    if (pace) record["compute_ms_per_step"] = pace->ms_per_step;
    if (s.early_stopping.tracking()) record["early_stopping"] = s.early_stopping.to_json();
    if (const auto best = checkpoints.path_for(s.early_stopping.best_step());
        o.train.checkpoint.keep_best && s.early_stopping.best() && std::filesystem::exists(best)) {
      record["best_checkpoint"] = best.string();
      s.log->info("best checkpoint (test {} {:.4f}): {}", s.early_stopping.metric(), *s.early_stopping.best(),
                  best.string());
    }
    std::string efficiency;
    if (o.train.baseline_samples_per_s > 0) {
      const double e = result.samples_per_second / (s.workers() * o.train.baseline_samples_per_s);
      record["scaling_efficiency"] = e;
      efficiency = fmt::format(", scaling efficiency {:.2f} against {:.1f} samples/s on one worker", e,
                               o.train.baseline_samples_per_s);
    }
    s.write_metrics(record);
    s.metrics.close();  // an error the file system reports only at close fails the job too
    if (s.group) {
      s.log->info("summary: {} workers, {:.1f} samples/s, {:.0f}% of step time waiting on communication, {:.0f}% of "
                  "gradient all-reduce time hidden (not waited for: it ran behind {}){}{}",
                  s.workers(), result.samples_per_second, 100 * result.comm_wait_share,
                  100 * result.allreduce_hidden_share, s.allreduce_hidden_behind(), efficiency,
                  result.warmup_steps > 0 ? " (samples/s after the first step)" : "");
    }
  }
  return result;
}

}  // namespace aiacc::trainer
