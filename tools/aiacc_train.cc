// aiacc-train CONFIG.yaml [--set key=value]... [--dry-run | --emit slurm|kubernetes]
// Exit status: 0 success; 2 bad config or usage; 1 failure at run time. Every failure prints one
// message on stderr naming its context (file:line: key, data file, peer rank).
#include <sys/prctl.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "core/net/message_memory.h"
#include "tools/trainer/checkpoint.h"
#include "tools/trainer/emit.h"
#include "tools/trainer/job_options.h"
#include "tools/trainer/launch.h"
#include "tools/trainer/placement.h"
#include "tools/trainer/process_group.h"
#include "tools/trainer/stop_signal.h"
#include "tools/trainer/trainer.h"
#include <dlfcn.h>

#include <filesystem>

namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

// A job on a GPU (job.device) loads the CUDA plugin (tools/cuda_plugin.cc), which registers
// CUDA's tensors and layer ops. AIACC_CUDA_PLUGIN names it; else libaiacc_cuda.so next to this
// program.
void register_device(const aiacc::trainer::JobOptions& job, int local_rank) {
  const std::optional<aiacc::Device> device = aiacc::trainer::job_device(job, local_rank);
  if (device->is_cpu()) return;
  std::string path;
  if (const char* configured = std::getenv("AIACC_CUDA_PLUGIN")) {
    path = configured;
  } else {
    path = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "libaiacc_cuda.so").string();
  }
  void* plugin = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept for the process's life
  if (plugin == nullptr) {
    throw aiacc::ConfigError(fmt::format("job.device: {}: cannot load the CUDA plugin {} ({}); this build "
                                         "may have no CUDA (nvcc), or set AIACC_CUDA_PLUGIN",
                                         device->str(), path, dlerror()));
  }
  using Register = int (*)(int, char*, std::size_t);
  auto register_cuda = reinterpret_cast<Register>(dlsym(plugin, "aiacc_cuda_plugin_register"));
  if (register_cuda == nullptr) {
    throw aiacc::ConfigError(fmt::format("job.device: {}: {} is not aiacc-train's CUDA plugin", device->str(), path));
  }
  char error[512] = {};
  if (register_cuda(device->index, error, sizeof error) != 0) {
    throw aiacc::ConfigError(fmt::format("job.device: {}: {}", device->str(), error));
  }
}

// job.threads 0: the compute threads default_compute_threads() gives, set and logged.
void use_default_compute_threads(std::optional<int> ranks_on_host) {
  const auto threads = aiacc::trainer::default_compute_threads(ranks_on_host);
  omp_set_num_threads(threads.count);
  aiacc::log::get("trainer")->info("{} compute thread{} (job.threads 0): {}", threads.count,
                                   threads.count == 1 ? "" : "s", threads.source);
}

// One process of a distributed job: a worker trains, a server serves its shard.
int run_rank(const aiacc::trainer::JobOptions& job, const aiacc::trainer::ProcessRole& role,
             const std::string& eval_checkpoint) {
  using namespace aiacc;
  const auto& cluster = job.cluster;
  log::set_role(role.name(cluster));
  // job.threads 0 shares the host's cores among the job's ranks there. Where no launcher
  // variable says how many there are, only the rendezvous tells, so the count is set again
  // after it (until then: this process alone, for the float mode's team).
  if (job.job.threads == 0) omp_set_num_threads(trainer::default_compute_threads().count);
  // Before the process group starts its stream threads (they inherit it), on servers too: their
  // sparse optimiser state decays like a worker's.
  trainer::apply_float_mode(job);
  auto group = std::make_shared<trainer::ProcessGroup>(cluster, role);
  if (job.job.threads == 0) use_default_compute_threads(group->ranks_on_host());
  try {
    group->check_agreement("resolved configuration", trainer::agreement_yaml(job));
    if (!group->is_worker()) {
      // A shard outlives a stop signal until the workers have saved their checkpoint (it holds
      // the tables' rows) and shut it down; a signal that reaches it alone reaches the workers
      // through the store. A second signal ends it at once.
      std::optional<trainer::StopSignals> stop_signals;
      if (job.train.checkpoint.on_signal) stop_signals.emplace();
      group->serve_shard([&] { return stop_signals ? stop_signals->received() : 0; });
      return 0;  // shut down by the workers: whether the job stopped is theirs to say
    }
    if (group->worker() == 0) {
      log::get("trainer")->info("resolved configuration:\n{}", trainer::resolved_yaml(job));
    }
    register_device(job, role.local_rank);
    trainer::Trainer trainer(job, group);
    int stopped_by_signal = 0;
    if (eval_checkpoint.empty()) {
      stopped_by_signal = trainer.run().stopped_by_signal;
    } else {
      trainer.evaluate_checkpoint(eval_checkpoint);
    }
    group->finish();
    if (stopped_by_signal != 0) return trainer::stopped_exit_status(stopped_by_signal);
  } catch (const std::exception& e) {
    // Under an outer launcher nobody else ends the other ranks: those waiting at the store
    // hear of it there.
    group->report_failure(e.what(), dynamic_cast<const ConfigError*>(&e) != nullptr);
    throw;
  }
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{"aiacc-train: distributed deep-learning training from a YAML job config"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool dry_run = false;
  bool print_reference = false;
  std::string emit_target;
  std::string eval_checkpoint;
  app.add_option("config", config_path, "job config (YAML); see configs/reference.yaml");
  app.add_option("--set", overrides, "override a config key: --set optimizer.lr=0.05 (repeatable)")
      ->type_name("KEY=VALUE");
  auto* dry_run_flag = app.add_flag("--dry-run", dry_run, "print the resolved config and the plan, then exit");
  app.add_flag("--print-reference", print_reference,
               "print every config key with its default and doc (configs/reference.yaml)");
  auto* eval_option = app.add_option("--eval", eval_checkpoint,
                                     "evaluate this checkpoint folder (a run's checkpoints/step-N) on the test "
                                     "split, distributed like training, instead of training")
                          ->type_name("CHECKPOINT")
                          // A dry run plans training: the checkpoint would go unread, unchecked.
                          ->excludes(dry_run_flag);
  // The emitted files train: an evaluation or a dry run would be lost in them without a word.
  app.add_option("--emit", emit_target,
                 "print an sbatch script (slurm) or a Kubernetes manifest (kubernetes) that runs "
                 "this job on a cluster, then exit")
      ->check(CLI::IsMember({"slurm", "kubernetes"}))
      ->excludes(eval_option)
      ->excludes(dry_run_flag);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "aiacc-train: %s\nRun 'aiacc-train --help' for usage.\n", e.what());
    return kExitUsage;
  }
  if (print_reference) {
    std::cout << aiacc::trainer::reference_yaml();
    return 0;
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "aiacc-train: a job config is required: aiacc-train CONFIG.yaml\n");
    return kExitUsage;
  }

  aiacc::trainer::JobOptions job = aiacc::trainer::load_job(config_path, overrides);
  // OpenMP reads OMP_NUM_THREADS itself when job.threads leaves the count to it: checked here,
  // before any parallel region could fail on a count no machine has.
  if (job.job.threads == 0) (void)aiacc::trainer::default_compute_threads();
  if (!emit_target.empty()) {
    aiacc::trainer::check_ps_rules_have_servers(job.cluster);  // every rank of the emitted job would fail
    std::cout << aiacc::trainer::emit_cluster_files(emit_target, job, config_path, overrides);
    return 0;
  }
  aiacc::log::configure(job.log);
  aiacc::log::set_role("worker 0");
  const auto& cluster = job.cluster;
  if (!dry_run) {
    if (auto role = aiacc::trainer::role_from_environment(cluster)) return run_rank(job, *role, eval_checkpoint);
  }
  // Tables on servers the job has none of: every rank would refuse them once it built its model,
  // and a dry run halfway through its plan. Once, here, before any starts (an outer launcher's
  // ranks find it in the trainer, where the failure reaches the others).
  aiacc::trainer::check_ps_rules_have_servers(cluster);
  if (!dry_run && cluster.launcher == "external") {
    throw aiacc::ConfigError(
        "cluster.launcher is external but no launcher variables are set (OMPI_COMM_WORLD_RANK, "
        "PMI_RANK, SLURM_PROCID or RANK/WORLD_SIZE): start the job with mpirun, srun or torchrun");
  }
  if (cluster.max_restarts > 0 && job.train.checkpoint.resume != "auto") {
    throw aiacc::ConfigError(fmt::format(
        "cluster.max_restarts: {} restarts a failed job from its newest checkpoint, which needs "
        "train.checkpoint.resume: auto (it is '{}')",
        cluster.max_restarts, job.train.checkpoint.resume));
  }
  // --eval of something that is no checkpoint: every process would make its data and then fail
  // alike, so it is refused before any starts. (Ranks an outer launcher starts find it in load(),
  // where the failure reaches the other ranks.)
  const auto check_eval_checkpoint = [&] {
    if (eval_checkpoint.empty()) return;
    try {
      aiacc::trainer::check_checkpoint_folder(eval_checkpoint);
    } catch (const aiacc::DataError& e) {
      throw aiacc::ConfigError(fmt::format("--eval: {}", e.what()));
    }
  };
  if (!dry_run && cluster.distributed()) {
    // Every rank would fail alike, each printing it (and a missing file can only fail again):
    // once, here, before any starts.
    aiacc::data::check_data_files(job.data);
    check_eval_checkpoint();
    aiacc::log::set_role("launcher");
    std::vector<std::string> args(argv, argv + argc);
    const auto result = aiacc::trainer::launch_local(cluster, args, job.train.checkpoint.on_signal);
    if (result.exit_status != 0) {
      std::fprintf(stderr, "aiacc-train: job %s: %s\n", result.stopped ? "stopped" : "failed", result.failure.c_str());
    }
    return result.exit_status;
  }
  if (dry_run) {
    std::cout << "# resolved configuration\n" << aiacc::trainer::resolved_yaml(job) << "\n# plan\n";
    // The plan, not the device: a dry run needs no GPU (nor loads CUDA).
    aiacc::trainer::JobOptions plan = job;
    plan.job.device = "cpu";
    aiacc::trainer::Trainer trainer(plan);
    trainer.describe(std::cout);
    return 0;
  }
  check_eval_checkpoint();
  // As a rank does (run_rank): OpenMP's own default would take every allowed core, however
  // little CPU time a container's limit leaves them.
  if (job.job.threads == 0) use_default_compute_threads(std::nullopt);
  register_device(job, 0);
  aiacc::trainer::Trainer trainer(job);
  if (!eval_checkpoint.empty()) {
    trainer.evaluate_checkpoint(eval_checkpoint);
    return 0;
  }
  aiacc::log::get("trainer")->info("resolved configuration:\n{}", aiacc::trainer::resolved_yaml(job));
  const int stopped_by_signal = trainer.run().stopped_by_signal;
  return stopped_by_signal != 0 ? aiacc::trainer::stopped_exit_status(stopped_by_signal) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The local launcher starts its ranks through /proc/self/exe (the very binary, even if a
  // rebuild replaces the file meanwhile), which names them "exe": ps, top and pgrep would not
  // find them by the program's name.
  prctl(PR_SET_NAME, "aiacc-train", 0, 0, 0);
  aiacc::net::keep_freed_message_memory();
  try {
    return run(argc, argv);
  } catch (const aiacc::ConfigError& e) {
    std::fprintf(stderr, "aiacc-train: config error: %s\n", e.what());
    return kExitUsage;
  } catch (const aiacc::Error& e) {
    std::fprintf(stderr, "aiacc-train: error: %s\n", e.what());
    return kExitRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "aiacc-train: unexpected error: %s\n", e.what());
    return kExitRuntime;
  }
}
