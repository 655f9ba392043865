#include "tools/trainer/job_options.h"

#include <cstdlib>
#include <cstring>

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

std::optional<int> local_process_count() {
  for (const char* name : {"AIACC_LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE",
                           "SLURM_NTASKS_PER_NODE"}) {
    if (const char* value = std::getenv(name)) {
      const int n = std::atoi(value);
      if (n > 0) return n;
    }
  }
  return std::nullopt;
}

}  // namespace aiacc::trainer
