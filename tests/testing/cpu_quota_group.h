// CpuQuotaGroup: a cgroup v1 cpu group with a CPU quota, made for a test (as root, where
// /sys/fs/cgroup/cpu is writable) and removed when it goes out of scope, whatever the test did.
// Processes join it by writing their pid to procs(); they must have exited by then.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace aiacc::testing {

class CpuQuotaGroup {
 public:
  // `name` is made unique by this process's id; `quota_us` of CPU time in each `period_us`.
  CpuQuotaGroup(const std::string& name, long quota_us, long period_us = 100000) {
    const std::filesystem::path hierarchy = "/sys/fs/cgroup/cpu";
    if (::geteuid() != 0 || !std::filesystem::exists(hierarchy / "cpu.cfs_quota_us")) {
      why_not_ = "needs root and a cgroup v1 cpu hierarchy at " + hierarchy.string();
      return;
    }
    folder_ = hierarchy / (name + "-" + std::to_string(::getpid()));
    std::error_code error;
    if (!std::filesystem::create_directory(folder_, error)) {
      why_not_ = "cannot make " + folder_.string() + ": " + error.message();
      folder_.clear();
      return;
    }
    // The period first: a quota is checked against the period (and the parent's limit).
    if (!write(folder_ / "cpu.cfs_period_us", period_us) || !write(folder_ / "cpu.cfs_quota_us", quota_us)) {
      why_not_ = "cannot set a quota of " + std::to_string(quota_us) + " us per " + std::to_string(period_us) +
                 " us in " + folder_.string() + " (a lower limit above it?)";
    }
  }
  ~CpuQuotaGroup() {
    std::error_code error;
    if (!folder_.empty()) std::filesystem::remove(folder_, error);
  }
  CpuQuotaGroup(const CpuQuotaGroup&) = delete;
  CpuQuotaGroup& operator=(const CpuQuotaGroup&) = delete;

  // Empty when the group is ready, else why it is not (a reason to skip the test).
  const std::string& why_not() const { return why_not_; }
  std::filesystem::path procs() const { return folder_ / "cgroup.procs"; }

 private:
  static bool write(const std::filesystem::path& file, long value) {
    std::ofstream out(file);
    out << value << "\n";
    out.flush();
    return out.good();
  }
  std::filesystem::path folder_;
  std::string why_not_;
};

}  // namespace aiacc::testing
