// The CPUs a process may run on, for launchers that pin one process per CPU.
#pragma once

#include <vector>

namespace aiacc::util {

// The CPUs the calling thread may run on (taskset, cpusets), in ascending order; empty when
// the kernel does not say. Launchers pin process r to entry r % size.
std::vector<int> allowed_cpus();

}  // namespace aiacc::util
