// The CPUs a process may run on: for launchers that pin one process per CPU, and for defaults
// (compute threads, background readers, spinning waits) that should fit what a container allows.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace aiacc::util {

// The CPUs the calling thread may run on (taskset, cpusets), in ascending order; empty when
// the kernel does not say. Launchers pin process r to entry r % size.
std::vector<int> allowed_cpus();

// The CPU bandwidth limit of this process's cgroup, in CPUs (quota / period: `docker --cpus`,
// a Kubernetes container's `limits.cpu`), the lowest along its cgroup's path to the root of
// each hierarchy that has the cpu controller (cgroup v2 cpu.max, v1 cpu.cfs_quota_us over
// cpu.cfs_period_us). nullopt: no limit is set, or none can be read. Such a limit leaves every
// CPU allowed (sched_getaffinity still lists the host's), so only this says a process given
// one CPU's time on a 64-core host should not start 64 threads.
std::optional<double> cgroup_cpu_limit();
// The same from the texts of /proc/self/cgroup and /proc/self/mountinfo; the limit files are
// read under the mount points the mount table names (tests pass their own folders).
std::optional<double> cgroup_cpu_limit(std::string_view self_cgroup, std::string_view self_mountinfo);

// The CPUs a limit of `limit` CPUs' time can keep busy: rounded up (1.5 CPUs of time: 2
// threads can use it), at least 1.
std::size_t cpus_within(double limit);

// How many CPUs this process can keep busy at once: allowed_cpus().size(), or the CPUs within
// its cgroup's limit when that is lower. 0: unknown.
std::size_t usable_cpus();

}  // namespace aiacc::util
