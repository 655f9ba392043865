#include "tools/trainer/job_options.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

#include "core/util/cpus.h"

namespace aiacc::trainer {

JobOptions load_job(const std::string& path, const std::vector<std::string>& overrides) {
  config::Document document = config::Document::from_file(path);
  for (const auto& assignment : overrides) document.apply_override(assignment);
  return config::read<JobOptions>(document.root());
}

std::string resolved_yaml(const JobOptions& job) {
  return config::write(job, config::Writer::Mode::resolved);
}

std::string agreement_yaml(const JobOptions& job) {
  JobOptions shared = job;
  shared.cluster.ring.comm.interface = "(each process's own)";
  shared.cluster.security.token_file = "(each process's own)";
  return resolved_yaml(shared);
}

std::string reference_yaml() {
  std::string header =
      "# aiacc-train configuration reference: every key with its default and a one-line doc.\n"
      "# Generated from the config structs by `aiacc-train --print-reference`; a test fails when\n"
      "# this file and the structs disagree. A job config sets only what differs from here.\n"
      "# Sections named after a registered type (model.<type>, data.train.<type>, ...) hold that\n"
      "# type's options; only the block of the selected `type` is used.\n";
  const JobOptions defaults;
  return header + config::write(defaults, config::Writer::Mode::reference);
}

Device job_device(const JobOptions& job, int local_rank) {
  const std::optional<Device> device = Device::parse(job.job.device);
  if (!device) throw ConfigError(fmt::format("job.device: {}: expected cpu, cuda or cuda:N", job.job.device));
  if (job.job.device == "cuda" && job.cluster.workers > 1) {
    // A launcher that gives each process one GPU of its own (Slurm's --gpus-per-task, a
    // container with one device) leaves it visible as device 0, whatever the local rank.
    // Only where no other process of the job on this machine sees the same variable: one
    // CUDA_VISIBLE_DEVICES for a whole node would put every worker on one GPU.
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const bool one_visible = visible != nullptr && *visible != '\0' && std::strchr(visible, ',') == nullptr;
    const bool own_gpu = std::getenv("SLURM_GPUS_PER_TASK") != nullptr || local_process_count() == 1;
    if (one_visible && own_gpu) return Device::cuda(0);
    return Device::cuda(local_rank);
  }
  return *device;
}

namespace {

constexpr const char* kLocalCountVariables[] = {"AIACC_LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                "LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"};

// The first of kLocalCountVariables set to a positive count: its name and count.
std::optional<std::pair<const char*, int>> launcher_local_count() {
  for (const char* name : kLocalCountVariables) {
    if (const char* value = std::getenv(name)) {
      const int n = std::atoi(value);
      if (n > 0) return std::pair{name, n};
    }
  }
  return std::nullopt;
}

// OMP_NUM_THREADS as this process's thread count, or nullopt when it is unset or empty.
std::optional<int> omp_num_threads() {
  const char* configured = std::getenv("OMP_NUM_THREADS");
  if (configured == nullptr || *configured == '\0') return std::nullopt;
  const std::string_view text(configured);
  const std::string_view first = text.substr(0, text.find(','));
  int threads = 0;
  const auto [end, error] = std::from_chars(first.data(), first.data() + first.size(), threads);
  if (error != std::errc() || end != first.data() + first.size() || threads < 1 || threads > kMaxComputeThreads) {
    throw ConfigError(fmt::format("OMP_NUM_THREADS={}: expected a whole number of threads from 1 to {} "
                                  "(or set job.threads)", text, kMaxComputeThreads));
  }
  return threads;
}

}  // namespace

std::optional<int> local_process_count() {
  const auto found = launcher_local_count();
  return found ? std::optional<int>(found->second) : std::nullopt;
}

ComputeThreads default_compute_threads(std::optional<int> ranks_on_host) {
  if (const auto threads = omp_num_threads()) return {*threads, "OMP_NUM_THREADS"};
  int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int processes = 1;
  std::string source = fmt::format("this host's {} cores", machine);
  // A container's CPU limit (docker --cpus, a Kubernetes limits.cpu) leaves every core allowed:
  // threads for all of them would share the limit's time and be throttled in turn.
  if (const auto limit = util::cgroup_cpu_limit(); limit && util::cpus_within(*limit) < static_cast<std::size_t>(machine)) {
    machine = static_cast<int>(util::cpus_within(*limit));
    source += fmt::format(" cut to {} by its cgroup's CPU limit of {:g} CPU{}", machine, *limit, *limit == 1 ? "" : "s");
  }
  if (const auto local = launcher_local_count()) {
    processes = local->second;
    source += fmt::format(" shared by {} processes ({})", processes, local->first);
  } else if (ranks_on_host) {
    // A launcher that sets none of the variables (a hand-made torchrun-style environment) would
    // otherwise give every rank all the cores: N ranks on one host then run N times as many
    // threads as cores, tens of times slower.
    processes = *ranks_on_host;
    source += fmt::format(" shared by the {} ranks counted on it at the rendezvous store (no LOCAL_WORLD_SIZE "
                          "or other launcher variable says how many; job.threads sets the count)", processes);
  }
  const int share = std::max(1, machine / processes);
  // A confined process may still share its CPUs with other ranks (mpirun binding to a socket).
  const int allowed = static_cast<int>(util::allowed_cpus().size());
  if (allowed > 0 && allowed < share) return {allowed, fmt::format("{}, confined to {} CPUs", source, allowed)};
  return {share, source};
}

}  // namespace aiacc::trainer
