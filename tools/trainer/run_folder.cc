// Earlier runs in a run folder: found by their checkpoints and metrics records, refused or
// removed per train.checkpoint.resume, and kept apart from this run's trace.
#include "tools/trainer/run_folder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <system_error>

#include "core/error.h"
#include "core/log.h"
#include "tools/trainer/checkpoint.h"

namespace aiacc::trainer {

namespace fs = std::filesystem;

namespace {

std::int64_t count_records(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::int64_t records = 0;
  for (std::string line; std::getline(in, line);) records += line.empty() ? 0 : 1;
  return records;
}

// The traces a run merges into the folder (trace_file_name's names).
bool is_merged_trace(const fs::path& file) {
  const std::string name = file.filename().string();
  return name == "trace.json" || (name.starts_with("trace-") && name.ends_with(".json"));
}

// What the trainer writes into a run folder: the earlier run's part of it.
std::vector<fs::path> earlier_run_files(const fs::path& run_folder) {
  std::vector<fs::path> files;
  for (const char* name : {"checkpoints", "metrics.jsonl", "config.yaml", "trace"}) {
    if (fs::exists(run_folder / name)) files.push_back(run_folder / name);
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_folder, ec)) {
    if (entry.is_regular_file() && is_merged_trace(entry.path())) files.push_back(entry.path());
  }
  return files;
}

}  // namespace

std::string EarlierRun::describe() const {
  std::vector<std::string> parts;
  if (!checkpoints.empty()) {
    parts.push_back(fmt::format("{} checkpoint(s) (newest {})", checkpoints.size(),
                                checkpoints.back().filename().string()));
  }
  if (records > 0) parts.push_back(fmt::format("{} records in metrics.jsonl", records));
  return fmt::format("{}", fmt::join(parts, " and "));
}

EarlierRun find_earlier_run(const fs::path& run_folder) {
  EarlierRun earlier;
  earlier.checkpoints = CheckpointManager(run_folder, 0).list();
  earlier.records = count_records(run_folder / "metrics.jsonl");
  return earlier;
}

void prepare_run_folder(const JobOptions& options, const fs::path& run_folder, bool leader) {
  const std::string& resume = options.train.checkpoint.resume;
  if (resume == "never") {
    const EarlierRun earlier = find_earlier_run(run_folder);
    if (earlier.empty()) return;
    // Records of two runs in one file read as one run whose steps start over; a config.yaml
    // replaced beside the old checkpoints no longer describes them; and a later resume: auto
    // takes the higher step of either run's checkpoints.
    throw ConfigError(fmt::format(
        "train.checkpoint.resume: never starts afresh, but the run folder {} (job.run_dir {}, job.name {}) holds "
        "an earlier run: {}; to start afresh set another job.name or job.run_dir (e.g. --set job.name={}-2), or "
        "set train.checkpoint.resume: overwrite to remove that run's checkpoints, metrics and traces first; "
        "resume: auto continues it",
        run_folder.string(), options.job.run_dir, options.job.name, earlier.describe(), options.job.name));
  }
  if (resume != "overwrite" || !leader) return;
  std::vector<std::string> removed;
  for (const fs::path& path : earlier_run_files(run_folder)) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) {
      throw IoError(fmt::format("train.checkpoint.resume: overwrite: cannot remove {} of the earlier run: {}",
                                path.string(), ec.message()));
    }
    removed.push_back(path.filename().string());
  }
  if (!removed.empty()) {
    log::get("trainer")->warn("train.checkpoint.resume: overwrite: removed the earlier run's {} from {}",
                              fmt::join(removed, ", "), run_folder.string());
  }
}

std::string trace_file_name(const fs::path& run_folder, std::int64_t start_step) {
  const std::string stem = start_step == 0 ? "trace" : fmt::format("trace-step-{}", start_step);
  std::string name = stem + ".json";
  for (int k = 2; fs::exists(run_folder / name); ++k) name = fmt::format("{}-{}.json", stem, k);
  return name;
}

}  // namespace aiacc::trainer
