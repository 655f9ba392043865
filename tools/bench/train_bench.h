// aiacc-bench train: scaling efficiency of a job config, 1 worker against N workers.
#pragma once

namespace aiacc::bench {

// `argv[1]` is "train". Returns the process exit status (2 for bad arguments). See
// train_bench.cc for the options and what is measured.
int run_train_bench(int argc, char** argv);

}  // namespace aiacc::bench
