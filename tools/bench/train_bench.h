// aiacc-bench train: scaling efficiency of a job config, 1 worker against N workers; and
// aiacc-bench accumulate: gradient accumulation's throughput and memory against one batch.
#pragma once

namespace aiacc::bench {

// `argv[1]` is "train". Returns the process exit status (2 for bad arguments). See
// train_bench.cc for the options and what is measured.
int run_train_bench(int argc, char** argv);

// `argv[1]` is "accumulate": one batch of B x K against K micro-batches of B (gradient
// accumulation), samples/s and peak memory. Same conventions.
int run_accumulate_bench(int argc, char** argv);

}  // namespace aiacc::bench
