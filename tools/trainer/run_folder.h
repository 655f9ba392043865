// What earlier runs left in a run folder (<job.run_dir>/<job.name>), for
// train.checkpoint.resume: never (refused beside them) and overwrite (removed first), and the
// names this run's files take beside theirs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/trainer/job_options.h"

namespace aiacc::trainer {

// An earlier run's outputs in a run folder.
struct EarlierRun {
  std::vector<std::filesystem::path> checkpoints;  // checkpoints/step-N folders, oldest first
  std::int64_t records = 0;                        // lines of metrics.jsonl
  bool empty() const { return checkpoints.empty() && records == 0; }
  // "2 checkpoint(s) (newest step-000000000012) and 5 records in metrics.jsonl"
  std::string describe() const;
};
EarlierRun find_earlier_run(const std::filesystem::path& run_folder);

// Applies train.checkpoint.resume to what `run_folder` holds, before this run writes anything
// there. never: ConfigError naming the folder, job.run_dir and job.name, what the earlier run
// left and how to start afresh, when the folder holds an earlier run (every worker checks).
// overwrite: the `leader` removes the earlier run's checkpoints, metrics.jsonl, config.yaml and
// traces (the folder's other files are left alone) and logs what it removed; IoError naming a
// path it cannot remove. ConfigError naming the key and the folder instead, removing nothing,
// in a restarted attempt of the job (AIACC_RESTART_COUNT, SLURM_RESTART_COUNT or
// TORCHELASTIC_RESTART_COUNT above 0: it would remove the checkpoints it is to resume from;
// every worker checks) and, where there is something to remove, when the leader could not lock
// the folder (`locked` false: no RunFolderLock keeps another job out, which may be using those
// files). auto: nothing (the run continues the folder's newest checkpoint).
void prepare_run_folder(const JobOptions& options, const std::filesystem::path& run_folder, bool leader,
                        bool locked);

// The file a run starting at `start_step` merges its trace into: trace.json from step 0,
// trace-step-N.json for a run resumed at step N, with -2, -3, ... appended where an earlier
// run of this folder took that name, so no run's trace replaces another's.
std::string trace_file_name(const std::filesystem::path& run_folder, std::int64_t start_step);

}  // namespace aiacc::trainer
