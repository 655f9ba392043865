// Earlier runs in a run folder: found by their checkpoints and metrics records, refused or
// removed per train.checkpoint.resume, and kept apart from this run's trace.
#include "tools/trainer/run_folder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string_view>
#include <system_error>

#include "core/error.h"
#include "core/log.h"
#include "tools/trainer/checkpoint.h"
#include "tools/trainer/launch.h"

namespace aiacc::trainer {

namespace fs = std::filesystem;

namespace {

std::int64_t count_records(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::int64_t records = 0;
  for (std::string line; std::getline(in, line);) records += line.empty() ? 0 : 1;
  return records;
}

// Drops "-<digits>" from the front of `rest`; false (and `rest` unchanged) where it does not start so.
bool drop_number(std::string_view& rest) {
  if (!rest.starts_with('-')) return false;
  std::size_t end = 1;
  while (end < rest.size() && rest[end] >= '0' && rest[end] <= '9') ++end;
  if (end == 1) return false;
  rest.remove_prefix(end);
  return true;
}

// The traces a run merges into the folder, by trace_file_name's names only: trace.json,
// trace-step-N.json, and either with -K before .json. A user's trace-analysis.json is not one.
bool is_merged_trace(const fs::path& file) {
  const std::string name = file.filename().string();
  std::string_view rest = name;
  if (!rest.starts_with("trace") || !rest.ends_with(".json")) return false;
  rest = rest.substr(5, rest.size() - 5 - 5);
  if (rest.starts_with("-step")) {
    rest.remove_prefix(5);
    if (!drop_number(rest)) return false;
  }
  if (!rest.empty()) drop_number(rest);
  return rest.empty();
}

// What the trainer writes into a run folder: the earlier run's part of it. symlink_status: a
// `checkpoints` link whose target is gone is still the earlier run's (exists() follows it).
std::vector<fs::path> earlier_run_files(const fs::path& run_folder) {
  std::vector<fs::path> files;
  for (const char* name : {"checkpoints", "metrics.jsonl", "config.yaml", "trace"}) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(run_folder / name, ec))) files.push_back(run_folder / name);
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_folder, ec)) {
    if (entry.is_regular_file() && is_merged_trace(entry.path())) files.push_back(entry.path());
  }
  return files;
}

// The variable that says this process is a restarted attempt of its job, with its value.
std::optional<std::string> restart_of_this_job() {
  for (const char* name : {kRestartCountVariable, "SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && std::atoll(value) > 0) return fmt::format("{}={}", name, value);
  }
  return std::nullopt;
}

std::vector<std::string> file_names(const std::vector<fs::path>& files) {
  std::vector<std::string> names;
  for (const fs::path& file : files) names.push_back(file.filename().string());
  return names;
}

// The reasons not to overwrite: a restart (every worker) and a folder nothing keeps another
// job out of (the leader, which removes).
void check_overwrite(const fs::path& run_folder, bool leader, bool locked, const std::vector<fs::path>& files) {
  if (const auto restart = restart_of_this_job()) {
    throw ConfigError(fmt::format(
        "train.checkpoint.resume: overwrite in a restarted attempt of the job ({}): it would remove the "
        "checkpoints in the run folder {} that this attempt is to resume from, and start over; set "
        "train.checkpoint.resume: auto for a job that may be restarted",
        *restart, run_folder.string()));
  }
  if (!leader || locked || files.empty()) return;
  throw ConfigError(fmt::format(
      "train.checkpoint.resume: overwrite would remove {} from the run folder {}, but the folder cannot be locked "
      "(its filesystem has no locks), so nothing shows that no other job is using them; remove them yourself "
      "once no job runs there, or start afresh in another folder (another job.name or job.run_dir)",
      fmt::join(file_names(files), ", "), run_folder.string()));
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

void prepare_run_folder(const JobOptions& options, const fs::path& run_folder, bool leader, bool locked) {
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
  if (resume != "overwrite") return;
  const std::vector<fs::path> files = leader ? earlier_run_files(run_folder) : std::vector<fs::path>{};
  check_overwrite(run_folder, leader, locked, files);
  for (const fs::path& path : files) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) {
      throw IoError(fmt::format("train.checkpoint.resume: overwrite: cannot remove {} of the earlier run: {}",
                                path.string(), ec.message()));
    }
  }
  if (!files.empty()) {
    log::get("trainer")->warn("train.checkpoint.resume: overwrite: removed the earlier run's {} from {}",
                              fmt::join(file_names(files), ", "), run_folder.string());
  }
}

std::string trace_file_name(const fs::path& run_folder, std::int64_t start_step) {
  const std::string stem = start_step == 0 ? "trace" : fmt::format("trace-step-{}", start_step);
  std::string name = stem + ".json";
  for (int k = 2; fs::exists(run_folder / name); ++k) name = fmt::format("{}-{}.json", stem, k);
  return name;
}

}  // namespace aiacc::trainer
