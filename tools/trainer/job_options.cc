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
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (visible != nullptr && *visible != '\0' && std::strchr(visible, ',') == nullptr) return Device::cuda(0);
    return Device::cuda(local_rank);
  }
  return *device;
}

}  // namespace aiacc::trainer
