// aiacc-bench ps: parameter-server throughput with shards and workers as local processes.
#pragma once

namespace aiacc::bench {

// `argv[1]` is "ps". Returns the process exit status (2 for bad arguments). See ps_bench.cc
// for the options and what is measured.
int run_ps_bench(int argc, char** argv);

}  // namespace aiacc::bench
