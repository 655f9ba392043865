// aiacc-bench train: scaling efficiency of a job config (flags: kUsage below, aiacc-bench train
// --help).
//
// Runs the job in CONFIG twice with the real aiacc-train program: on 1 worker, then on
// --workers workers (2 by default), each with --threads compute threads, for --steps steps,
// without evaluation or checkpoints. Each run is pinned (taskset) to as many cores as it has
// workers: one core each, so the 1-worker baseline does not get a spare core for its loader
// and communication threads that the N workers do not have. Throughput is each run's steady
// samples/s from its summary record (after its first step, whose start-up -- the loader's first
// batch, the collectives' first connections -- is no measure of the job's speed), both runs in
// one invocation; it prints
//   scaling efficiency E = throughput(N) / (N x throughput(1))
// and, from the N-worker run's summary, the share of step time spent waiting on communication
// and the share of gradient all-reduce time hidden (not waited for: the summary says what it
// ran behind, backward and for parameter-server tables the row pushes). --repeat R runs R such
// pairs back to back, alternating which run of a pair goes first (1 worker, N workers, N
// workers, 1 worker, ...): each pair's E compares runs made under the same machine conditions,
// a steady drift lifts every other pair's E as much as it lowers the others', and the median
// E over the pairs is reported with its range, as a shared or throttled machine's throughput
// drifts by more than the effect. --ceiling adds, next to each pair's 1-worker run, N independent
// 1-worker jobs at once (one per core): what N workers reach with no communication at all, so a
// user can tell the machine's share of a low E (shared caches, memory bandwidth, a VM's
// neighbours) from the distributed step's; the slowest of those jobs over the 1-worker run is
// the synchronous ceiling, as a synchronous step goes at its slowest worker's pace (a vCPU
// slower than the others caps E there however cheap the communication). The keys the bench
// sets for every run (bench_settings) are its own: a --set of one of them (or of a section
// holding one) is refused, as it would silently change what is measured or where the bench
// reads the run's metrics. CONFIG with
// those settings is first checked by aiacc-train --dry-run, so that a misspelt key ends the
// bench at once, with aiacc-train's message, rather than in a log after a run started.
//
// aiacc-bench accumulate (kAccumulateUsage): what gradient accumulation costs and saves. Runs
// the job with one batch of --batch x K examples per worker and step, and with K micro-batches
// of --batch (train.gradient_accumulation_steps K): the same global batch, the same examples.
// Prints each run's samples/s and the peak resident memory of its largest process (wait4's
// ru_maxrss: a worker's, or the launcher's, whichever is larger), and the split run's over the
// whole run's, with --repeat pairs alternating as above.
#include "tools/bench/train_bench.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/node.h"
#include "core/error.h"
#include "core/util/cpus.h"
#include "tools/bench/bench_args.h"
#include "tools/trainer/worker_pace.h"

namespace aiacc::bench {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kUsage = R"(usage: aiacc-bench train CONFIG [options]
Runs the job in CONFIG with aiacc-train on 1 worker and on N workers, one core each, and prints
samples/s (each run's steady figure, after its first step) and the scaling efficiency
E = throughput(N) / (N x throughput(1)).
  --workers N        workers of the second run, 2 to 1024 (default 2)
  --steps N          steps of each run, 20 to 100000000 (default 200)
  --threads T        compute threads per worker, 1 to 1024 (default 1)
  --repeat R         pairs of runs, alternating which goes first; the median E is reported,
                     1 to 100 (default 1)
  --ceiling          with each pair, also run N independent 1-worker jobs at once, one per
                     core: their summed samples/s over N x the pair's 1-worker run is the E
                     this machine allows with no communication at all (shared caches, memory
                     bandwidth, a VM's neighbours), printed beside E; and the slowest
                     job's samples/s over the 1-worker run's: the synchronous ceiling, as
                     every synchronous step waits for the slowest worker's core
  --set KEY=VALUE    override a key of CONFIG (repeatable); the keys the bench sets itself
                     (cluster.workers, job.threads, train.max_steps, job.run_dir, job.name, ...)
                     are refused
  --json FILE        also write the results as JSON (checked first, written at the end)
  -h, --help         this text
CONFIG and the --set values are checked first (aiacc-train --dry-run with N workers). Each run's
log and metrics go to a folder in the temporary directory (/tmp/aiacc-bench-train-PID), which
is removed when the bench succeeds and kept when a run fails; a failed run's error lines are
printed, and the bench exits 2 when aiacc-train refused the configuration, else 1.
)";

constexpr std::string_view kAccumulateUsage = R"(usage: aiacc-bench accumulate CONFIG --batch B --micro-batches K [options]
Runs the job in CONFIG with aiacc-train twice, the same global batch each time: one batch of
B x K examples per worker and step, and K micro-batches of B (train.gradient_accumulation_steps
K). Prints each run's samples/s (after its first step) and the peak resident memory of its
largest process, and the micro-batched run's figures over the whole batch's.
  --batch B          micro-batch size per worker (data.batch_size of the split run), 1 to 1000000
  --micro-batches K  micro-batches a step, 2 to 1024
  --workers N        workers of both runs, one core each, 1 to 1024 (default 1)
  --steps N          steps of each run, 20 to 100000000 (default 50)
  --threads T        compute threads per worker, 1 to 1024 (default 1)
  --repeat R         pairs of runs, alternating which goes first; the median pair (by the
                     throughput ratio) is reported, 1 to 100 (default 1)
  --set KEY=VALUE    override a key of CONFIG (repeatable); the keys the bench sets itself
                     (data.batch_size, train.gradient_accumulation_steps, cluster.workers, ...)
                     are refused
  --json FILE        also write the results as JSON (checked first, written at the end)
  -h, --help         this text
CONFIG and the --set values are checked first (aiacc-train --dry-run, both runs' settings); logs
go to /tmp/aiacc-bench-accumulate-PID, removed when the bench succeeds.
)";

// The two subcommands this file serves.
enum class Bench { train, accumulate };

const char* bench_name(Bench bench) { return bench == Bench::train ? "train" : "accumulate"; }

struct Args {
  bool help = false;
  Bench bench = Bench::train;
  int batch = 0;                  // accumulate: --batch
  int micro_batches = 0;          // accumulate: --micro-batches
  std::string config;
  int steps = 200;
  int workers = 2;
  int threads = 1;
  int repeat = 1;
  bool ceiling = false;
  std::vector<std::string> overrides;
  std::string json;
};

struct RunFigures {
  double samples_per_s = 0;  // steady: after the run's first step
  double warmup_seconds = 0;  // the first step's
  double comm_wait_share = 0;
  double allreduce_hidden_share = 0;
  std::string allreduce_hidden_behind;  // what the all-reduce ran behind when not waited for
  std::vector<double> compute_ms_per_step;  // by worker: training time less communication wait
  double peak_rss_mib = 0;  // the largest process's peak resident memory (wait4's ru_maxrss)
};

// How a run of aiacc-bench accumulate splits its global batch: the whole batch at once
// (micro_batches 1), or in micro-batches; none for aiacc-bench train.
struct Split {
  int batch = 0;  // data.batch_size
  int micro_batches = 0;
};

std::string quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

fs::path program_dir() {
  char path[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) throw IoError("readlink /proc/self/exe failed");
  return fs::path(std::string(path, static_cast<std::size_t>(n))).parent_path();
}

// A config key every run sets, its value, and why a --set may not change it.
struct Setting {
  std::string key;
  std::string value;
  std::string_view why;
};

// The keys the bench sets for a run of `workers` workers named `name` in `run_dir`.
std::vector<Setting> bench_settings(const Args& a, int workers, const fs::path& run_dir, const std::string& name,
                                    const Split& split = {}) {
  constexpr std::string_view kMeasured = "the bench sets it for what it measures";
  std::vector<Setting> settings;
  if (a.bench == Bench::accumulate) {
    settings = {{"data.batch_size", std::to_string(split.batch), "use --batch"},
                {"train.gradient_accumulation_steps", std::to_string(split.micro_batches),
                 "use --micro-batches; the other run has 1"}};
  }
  std::vector<Setting> shared{
          {"cluster.workers", std::to_string(workers),
           a.bench == Bench::accumulate ? "use --workers" : "use --workers; the other run has 1"},
          {"job.threads", std::to_string(a.threads), "use --threads"},
          {"train.max_steps", std::to_string(a.steps), "use --steps"},
          {"train.epochs", "1000", "the runs last --steps steps"},
          {"train.log_every_steps", std::to_string(std::max(1, a.steps / 10)), kMeasured},
          {"train.eval_each_epoch", "false", kMeasured},
          {"train.checkpoint.at_end", "false", kMeasured},
          {"train.checkpoint.every_steps", "0", kMeasured},
          {"train.checkpoint.resume", "never", kMeasured},
          {"cluster.pin_cores", "true", "each run has one core per worker"},
          {"job.run_dir", run_dir.string(), "the bench reads each run's metrics from its own run folder"},
          {"job.name", name, "the bench reads each run's metrics from its own run folder"}};
  settings.insert(settings.end(), shared.begin(), shared.end());
  return settings;
}

// Refuses a --set the bench cannot pass on: not KEY=VALUE, or a key of bench_settings (or a
// section holding one: `--set job={...}` would replace job.run_dir).
void check_override(const Args& a, const std::string& assignment) {
  const auto equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw ConfigError(fmt::format("--set takes KEY=VALUE, got '{}'", assignment));
  }
  const std::string key = assignment.substr(0, equals);
  std::vector<std::string> inside;  // the bench's keys within section `key`
  for (const Setting& setting : bench_settings(a, a.workers, {}, {})) {
    if (!config::is_key_or_section_holding(key, setting.key)) continue;
    if (key == setting.key) {
      throw ConfigError(fmt::format("--set {}: {} is set by aiacc-bench {} for every run ({})", assignment,
                                    setting.key, bench_name(a.bench), setting.why));
    }
    inside.push_back(setting.key);
  }
  if (!inside.empty()) {
    throw ConfigError(fmt::format("--set {}: the section {} holds {}, which aiacc-bench {} sets for every run; "
                                  "set the section's other keys one by one", assignment, key, fmt::join(inside, ", "),
                                  bench_name(a.bench)));
  }
}

// The figures of the last run in a run folder's metrics.jsonl: from its summary record, after
// the last run_start record.
RunFigures read_figures(const fs::path& metrics_path) {
  std::ifstream metrics(metrics_path);
  std::optional<nlohmann::json> summary;
  int number = 0;
  for (std::string line; std::getline(metrics, line);) {
    ++number;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("{}:{}: not a JSON record: {}", metrics_path.string(), number, e.what()));
    }
    const auto kind = record.value("kind", std::string());
    if (kind == "run_start") summary.reset();
    if (kind == "summary") summary = record;
  }
  if (!summary) throw Error(fmt::format("no summary record in {}: the run did not finish", metrics_path.string()));
  RunFigures f;
  f.samples_per_s = summary->at("samples_per_s").get<double>();
  f.warmup_seconds = summary->value("warmup_seconds", 0.0);
  f.comm_wait_share = summary->value("comm_wait_share", 0.0);
  f.allreduce_hidden_share = summary->value("allreduce_hidden_share", 0.0);
  f.allreduce_hidden_behind = summary->value("allreduce_hidden_behind", std::string());
  if (summary->contains("compute_ms_per_step")) {
    f.compute_ms_per_step = summary->at("compute_ms_per_step").get<std::vector<double>>();
  }
  return f;
}

// The aiacc-train command line of the job on `workers` workers as run `name` in `run_dir`.
std::string train_command(const Args& a, int workers, const fs::path& run_dir, const std::string& name,
                          const Split& split = {}) {
  std::string command = quote((program_dir() / "aiacc-train").string()) + " " + quote(a.config);
  std::vector<std::string> sets;
  for (const Setting& setting : bench_settings(a, workers, run_dir, name, split)) {
    sets.push_back(setting.key + "=" + setting.value);
  }
  sets.insert(sets.end(), a.overrides.begin(), a.overrides.end());
  for (const auto& s : sets) command += " --set " + quote(s);
  return command;
}

// The lines of a failed aiacc-train's output that say what failed: those naming an error
// (its "error:" lines, log records of level E or C), else its last lines; at most the last 20.
std::vector<std::string> failure_lines(const std::string& output) {
  constexpr std::size_t kMaxLines = 20;
  std::vector<std::string> all, errors;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    all.push_back(line);
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower.find("error") != std::string::npos || line.find(" E [") != std::string::npos ||
        line.find(" C [") != std::string::npos) {
      errors.push_back(line);
    }
  }
  std::vector<std::string>& chosen = errors.empty() ? all : errors;
  if (chosen.size() > kMaxLines) chosen.erase(chosen.begin(), chosen.end() - kMaxLines);
  return chosen;
}

// Throws for aiacc-train's non-zero `status` (from std::system or pclose): `what` failed, with the
// failure lines of `output`, which `source` names. A ConfigError (exit 2) when aiacc-train
// exited 2, refusing the configuration; an Error (exit 1) otherwise.
void throw_failure(int status, const std::string& what, const std::string& source, const std::string& output) {
  const bool exited = status > 0 && WIFEXITED(status);
  const std::string how = exited ? fmt::format("exit status {}", WEXITSTATUS(status))
                          : status > 0 && WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                                                              : fmt::format("status {}", status);
  const std::vector<std::string> lines = failure_lines(output);
  std::string message = fmt::format("{} ({}); {} {}", what, how, source, lines.empty() ? "is empty" : "says:");
  for (const auto& line : lines) message += "\n  " + line;
  if (exited && WEXITSTATUS(status) == 2) throw ConfigError(message);
  throw Error(message);
}

// Checks CONFIG with the bench's settings for `workers` workers and the --set values, through
// aiacc-train --dry-run (nothing is run or written; data sets are loaded, as a run would).
void check_config(const Args& a, int workers, const fs::path& run_dir, const Split& split = {}) {
  // Its log records (stderr) are what tells a failure; the resolved config and plan are not.
  const std::string command = train_command(a, workers, run_dir, "bench-check", split) + " --dry-run 2>&1 >/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw IoError(fmt::format("cannot start aiacc-train --dry-run: {}", std::strerror(errno)));
  std::string output;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int status = ::pclose(pipe);
  if (status != 0) {
    throw_failure(status, fmt::format("aiacc-train --dry-run {} (with the bench's settings for {} workers) failed "
                                      "before any run", a.config, workers), "its output", output);
  }
}

// The CPU of the bench's `index`-th worker: the index-th this process may use (taskset, cpusets),
// round robin past the last, as the launcher pins its workers; `index` itself where the kernel
// does not say.
int bench_cpu(int index) {
  static const std::vector<int> allowed = util::allowed_cpus();
  return allowed.empty() ? index : allowed[static_cast<std::size_t>(index) % allowed.size()];
}

// taskset's list of the CPUs of workers 0..workers-1 (bench_cpu).
std::string bench_cpus(int workers) {
  std::vector<int> cpus;
  for (int i = 0; i < workers; ++i) cpus.push_back(bench_cpu(i));
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return fmt::format("{}", fmt::join(cpus, ","));
}

// Runs the job on `workers` workers as run `name` (a folder of its own in `run_dir`).
RunFigures run_job(const Args& a, int workers, const fs::path& run_dir, const std::string& name,
                   const Split& split = {}) {
  // One core per worker for both runs: the 1-worker run gets core 0 only (its loader and
  // communication threads share that core, as each worker's do in the N-worker run).
  const std::string command = fmt::format("exec taskset -c {} {}", bench_cpus(workers),
                                          train_command(a, workers, run_dir, name, split));
  const fs::path log = run_dir / (name + ".log");
  const std::string batches =
      split.micro_batches == 0   ? std::string()
      : split.micro_batches == 1 ? fmt::format(", 1 batch of {} a step", split.batch)
                                 : fmt::format(", {} micro-batches of {} a step", split.micro_batches, split.batch);
  std::cout << "running " << workers << " worker(s)" << batches << ": log " << log.string()
            << " (removed with its folder when the bench succeeds)" << std::endl;
  const std::string shell = command + " > " + quote(log.string()) + " 2>&1";
  // wait4, not std::system: the run's rusage holds the peak memory of its largest process (the
  // program, or a worker it started and reaped).
  const pid_t pid = ::fork();
  if (pid < 0) throw IoError(fmt::format("cannot start the {}-worker run: fork: {}", workers, std::strerror(errno)));
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", shell.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage{};
  while (::wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) throw IoError(fmt::format("cannot wait for the {}-worker run: {}", workers, std::strerror(errno)));
  }
  if (status != 0) {
    std::ifstream in(log);
    const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    throw_failure(status, fmt::format("the {}-worker run failed", workers), fmt::format("its log {} (kept)", log.string()),
                  output);
  }
  RunFigures figures = read_figures(run_dir / name / "metrics.jsonl");
  figures.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
  return figures;
}

// Runs --workers independent 1-worker jobs at once, job i pinned to worker i's CPU (the CPUs the
// N-worker run has), as runs `name`-1..N; returns each one's steady samples/s. When one fails
// (or cannot start) the others are stopped, not waited out: the bench then fails with its log.
std::vector<double> run_independent(const Args& a, const fs::path& run_dir, const std::string& name) {
  std::cout << "running " << a.workers << " independent 1-worker jobs at once, one per core: logs "
            << (run_dir / (name + "-*.log")).string() << std::endl;
  struct Job {
    std::string name;
    fs::path log;
    std::string command;
    pid_t pid = -1;
    int status = 0;
  };
  // Every command is made before the first process starts: nothing can throw between the forks.
  std::vector<Job> jobs(static_cast<std::size_t>(a.workers));
  for (int i = 0; i < a.workers; ++i) {
    Job& job = jobs[static_cast<std::size_t>(i)];
    job.name = fmt::format("{}-{}", name, i + 1);
    job.log = run_dir / (job.name + ".log");
    job.command = fmt::format("exec taskset -c {} {} > {} 2>&1", bench_cpu(i), train_command(a, 1, run_dir, job.name),
                              quote(job.log.string()));
  }
  std::size_t running = 0;
  int wait_error = 0;  // waitpid's errno when it failed with jobs still running
  auto stop_the_rest = [&] {
    for (const Job& job : jobs) {
      if (job.pid > 0) ::kill(job.pid, SIGTERM);
    }
  };
  // Reaps every started job; returns the first that failed (null when none did).
  auto reap_all = [&]() -> const Job* {
    const Job* failed = nullptr;
    while (running > 0) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, 0);
      if (pid < 0) {
        if (errno == EINTR) continue;
        wait_error = errno;  // reported by the caller: those jobs' figures cannot be trusted
        break;
      }
      for (Job& job : jobs) {
        if (job.pid != pid) continue;
        job.pid = -1;
        job.status = status;
        --running;
        if (status != 0 && failed == nullptr) {
          failed = &job;
          stop_the_rest();
        }
      }
    }
    return failed;
  };
  for (Job& job : jobs) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int error_number = errno;
      stop_the_rest();
      reap_all();
      throw IoError(fmt::format("cannot start the independent 1-worker job {}: fork: {}", job.name,
                                std::strerror(error_number)));
    }
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", job.command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    job.pid = pid;
    ++running;
  }
  const Job* failed = reap_all();
  if (failed == nullptr && running > 0) {
    stop_the_rest();
    throw IoError(fmt::format("cannot wait for {} of the independent 1-worker jobs: waitpid: {}", running,
                              std::strerror(wait_error)));
  }
  if (failed != nullptr) {
    std::ifstream in(failed->log);
    const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    throw_failure(failed->status, fmt::format("the independent 1-worker job {} failed (the others were stopped)",
                                              failed->name),
                  fmt::format("its log {} (kept)", failed->log.string()), output);
  }
  std::vector<double> samples_per_s;
  for (const Job& job : jobs) samples_per_s.push_back(read_figures(run_dir / job.name / "metrics.jsonl").samples_per_s);
  return samples_per_s;
}

// The indices of `values` from the smallest value to the largest.
std::vector<std::size_t> ascending_order(const std::vector<double>& values) {
  std::vector<std::size_t> order(values.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return values[x] < values[y]; });
  return order;
}

// The index of the median of `values` (the lower middle one for an even count): the pair of
// runs a bench reports.
std::size_t median_index(const std::vector<double>& values) {
  return ascending_order(values)[(values.size() - 1) / 2];
}

Args parse(int argc, char** argv, Bench bench) {
  Args a;
  a.bench = bench;
  const bool accumulate = bench == Bench::accumulate;
  if (accumulate) {
    a.steps = 50;
    a.workers = 1;
  }
  for (int i = 2; i < argc; ++i) {
    const std::string key = argv[i];
    if (is_help_flag(key)) {
      a.help = true;
      return a;
    }
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ConfigError(fmt::format("{} needs a value", key));
      return argv[++i];
    };
    if (key == "--steps") a.steps = static_cast<int>(integer_flag(key, value(), 20, 100000000));
    else if (key == "--workers") a.workers = static_cast<int>(integer_flag(key, value(), accumulate ? 1 : 2, 1024));
    else if (key == "--batch" && accumulate) a.batch = static_cast<int>(integer_flag(key, value(), 1, 1000000));
    else if (key == "--micro-batches" && accumulate) a.micro_batches = static_cast<int>(integer_flag(key, value(), 2, 1024));
    else if (key == "--threads") a.threads = static_cast<int>(integer_flag(key, value(), 1, 1024));
    else if (key == "--repeat") a.repeat = static_cast<int>(integer_flag(key, value(), 1, 100));
    else if (key == "--ceiling" && !accumulate) a.ceiling = true;
    else if (key == "--set") a.overrides.push_back(value());
    else if (key == "--json") a.json = value();
    else if (!key.empty() && key[0] != '-' && a.config.empty()) a.config = key;
    else throw ConfigError(fmt::format("unknown argument '{}' (see aiacc-bench {} --help)", key, bench_name(bench)));
  }
  if (a.config.empty()) throw ConfigError(fmt::format("no CONFIG given (see aiacc-bench {} --help)", bench_name(bench)));
  if (accumulate && (a.batch == 0 || a.micro_batches == 0)) {
    throw ConfigError(fmt::format("{} not given (see aiacc-bench accumulate --help)",
                                  a.batch == 0 ? "--batch" : "--micro-batches"));
  }
  if (accumulate && static_cast<std::int64_t>(a.batch) * a.micro_batches > 1000000) {
    throw ConfigError(fmt::format("--batch {} x --micro-batches {} is a batch of more than 1000000 examples", a.batch,
                                  a.micro_batches));
  }
  for (const auto& assignment : a.overrides) check_override(a, assignment);
  if (!a.json.empty()) check_output_path("--json", a.json);
  // The config itself (a missing file, a folder, a bad key) is checked by aiacc-train's dry run
  // before any run (run_pairs), in its own words.
  return a;
}

int run_pairs(const Args& a) {
  const fs::path run_dir = fs::temp_directory_path() / fmt::format("aiacc-bench-train-{}", ::getpid());
  check_config(a, a.workers, run_dir);
  fs::create_directories(run_dir);
  struct Pair {
    RunFigures one, many;
    double efficiency = 0;
    double ceiling = 0;  // --ceiling: the independent jobs' samples/s over N x one's
    // --ceiling: the slowest independent job's samples/s over one's. A synchronous step waits
    // for its slowest worker, so N workers on these cores reach at most N x that job's rate.
    double sync_ceiling = 0;
  };
  std::vector<Pair> pairs;
  for (int r = 0; r < a.repeat; ++r) {
    // A folder per run: each run starts afresh (train.checkpoint.resume: never).
    const auto one = [&] { return run_job(a, 1, run_dir, fmt::format("bench-1w-{}", r + 1)); };
    const auto many = [&] { return run_job(a, a.workers, run_dir, fmt::format("bench-{}w-{}", a.workers, r + 1)); };
    const auto independent = [&] { return run_independent(a, run_dir, fmt::format("bench-independent-{}", r + 1)); };
    Pair p;
    std::vector<double> independent_samples_per_s;
    // The independent jobs run next to the 1-worker run they are compared with.
    if (r % 2 == 0) {
      if (a.ceiling) independent_samples_per_s = independent();
      p.one = one();
      p.many = many();
    } else {
      p.many = many();
      p.one = one();
      if (a.ceiling) independent_samples_per_s = independent();
    }
    p.efficiency = p.many.samples_per_s / (a.workers * p.one.samples_per_s);
    if (a.ceiling) {
      double total = 0;
      for (double samples : independent_samples_per_s) total += samples;
      p.ceiling = total / (a.workers * p.one.samples_per_s);
      p.sync_ceiling = *std::min_element(independent_samples_per_s.begin(), independent_samples_per_s.end()) /
                       p.one.samples_per_s;
    }
    pairs.push_back(p);
  }
  // The pair with the median E (the lower middle one for an even count) is the one reported.
  std::vector<double> efficiencies;
  for (const auto& p : pairs) efficiencies.push_back(p.efficiency);
  const std::vector<std::size_t> order = ascending_order(efficiencies);
  const Pair& median = pairs[median_index(efficiencies)];
  const RunFigures& one = median.one;
  const RunFigures& many = median.many;
  const double efficiency = median.efficiency;
  std::cout << fmt::format("\n{}: {} steps, {} compute thread(s) per worker\n", a.config, a.steps, a.threads);
  if (pairs.size() > 1) {
    std::cout << fmt::format("{} pairs of runs, E per pair:", pairs.size());
    for (const auto& p : pairs) std::cout << fmt::format(" {:.3f}", p.efficiency);
    std::cout << fmt::format("\nthe pair with the median E (range {:.3f}-{:.3f}):\n",
                             pairs[order.front()].efficiency, pairs[order.back()].efficiency);
  }
  std::cout << fmt::format("{:>8} {:>14} {:>12} {:>16}\n", "workers", "samples/s", "comm wait", "all-reduce hidden");
  std::cout << fmt::format("{:>8} {:>14.1f} {:>12} {:>16}\n", 1, one.samples_per_s, "-", "-");
  std::cout << fmt::format("{:>8} {:>14.1f} {:>11.0f}% {:>15.0f}%\n", a.workers, many.samples_per_s,
                           100 * many.comm_wait_share, 100 * many.allreduce_hidden_share);
  std::cout << fmt::format("scaling efficiency E = {:.1f} / ({} x {:.1f}) = {:.3f}\n", many.samples_per_s,
                           a.workers, one.samples_per_s, efficiency);
  // Every synchronous step waits for the slowest worker: a slow core shows here first.
  if (const auto pace = trainer::worker_pace(many.compute_ms_per_step)) {
    std::cout << fmt::format("compute per step by worker (training time less communication wait): {:.3f} ms; "
                             "worker {} the slowest, {:.0f}% above worker {}\n",
                             fmt::join(pace->ms_per_step, " "), pace->slowest, 100 * pace->spread(), pace->fastest);
  }
  std::vector<double> ceilings, sync_ceilings;
  for (const auto& p : pairs) {
    ceilings.push_back(p.ceiling);
    sync_ceilings.push_back(p.sync_ceiling);
  }
  std::sort(ceilings.begin(), ceilings.end());
  std::sort(sync_ceilings.begin(), sync_ceilings.end());
  const double median_ceiling = ceilings[(ceilings.size() - 1) / 2];
  const double median_sync_ceiling = sync_ceilings[(sync_ceilings.size() - 1) / 2];
  if (a.ceiling) {
    std::cout << fmt::format("ceiling: {} independent 1-worker jobs at once reach {:.3f} of {} x one alone (median; "
                             "range {:.3f}-{:.3f}); the median pair's E is {:.3f} of its ceiling {:.3f}\n",
                             a.workers, median_ceiling, a.workers, ceilings.front(), ceilings.back(),
                             efficiency / median.ceiling, median.ceiling);
    std::cout << fmt::format("synchronous ceiling: the slowest of them reaches {:.3f} of one alone (median; range "
                             "{:.3f}-{:.3f}), the most E can be when every step waits for the slowest core; the "
                             "median pair's E is {:.3f} of its {:.3f}\n",
                             median_sync_ceiling, sync_ceilings.front(), sync_ceilings.back(),
                             efficiency / median.sync_ceiling, median.sync_ceiling);
  }
  std::cout << fmt::format("samples/s: after each run's first step (its start-up took {:.2f} s with 1 worker, {:.2f} s "
                           "with {})\n", one.warmup_seconds, many.warmup_seconds, a.workers);
  if (!many.allreduce_hidden_behind.empty()) {
    std::cout << fmt::format("all-reduce hidden: the share of gradient all-reduce time not waited for (it ran behind "
                             "{})\n", many.allreduce_hidden_behind);
  }
  if (!a.json.empty()) {
    nlohmann::json per_pair = nlohmann::json::array();
    nlohmann::json ceiling_per_pair = nlohmann::json::array();
    nlohmann::json sync_ceiling_per_pair = nlohmann::json::array();
    for (const auto& p : pairs) {
      per_pair.push_back(p.efficiency);
      ceiling_per_pair.push_back(p.ceiling);
      sync_ceiling_per_pair.push_back(p.sync_ceiling);
    }
    nlohmann::json out{{"benchmark", "train"}, {"config", a.config}, {"steps", a.steps},
                       {"threads_per_worker", a.threads}, {"workers", a.workers},
                       {"samples_per_s_1", one.samples_per_s}, {"samples_per_s_n", many.samples_per_s},
                       {"scaling_efficiency", efficiency}, {"scaling_efficiency_per_pair", per_pair},
                       {"comm_wait_share", many.comm_wait_share},
                       {"allreduce_hidden_share", many.allreduce_hidden_share},
                       {"allreduce_hidden_behind", many.allreduce_hidden_behind},
                       {"compute_ms_per_step_n", many.compute_ms_per_step}};
    if (a.ceiling) {
      out["ceiling"] = median_ceiling;
      out["scaling_efficiency_over_ceiling"] = efficiency / median.ceiling;
      out["ceiling_per_pair"] = ceiling_per_pair;
      out["ceiling_of_median_pair"] = median.ceiling;
      out["sync_ceiling"] = median_sync_ceiling;
      out["scaling_efficiency_over_sync_ceiling"] = efficiency / median.sync_ceiling;
      out["sync_ceiling_per_pair"] = sync_ceiling_per_pair;
      out["sync_ceiling_of_median_pair"] = median.sync_ceiling;
    }
    write_output(a.json, out.dump(1) + "\n");
  }
  fs::remove_all(run_dir);
  return 0;
}

int run_accumulate(const Args& a) {
  const fs::path run_dir = fs::temp_directory_path() / fmt::format("aiacc-bench-accumulate-{}", ::getpid());
  const Split whole{a.batch * a.micro_batches, 1};
  const Split split{a.batch, a.micro_batches};
  check_config(a, a.workers, run_dir, whole);
  check_config(a, a.workers, run_dir, split);
  fs::create_directories(run_dir);
  struct Pair {
    RunFigures whole, split;
    double throughput = 0;  // split over whole
  };
  std::vector<Pair> pairs;
  for (int r = 0; r < a.repeat; ++r) {
    const auto run_whole = [&] { return run_job(a, a.workers, run_dir, fmt::format("bench-whole-{}", r + 1), whole); };
    const auto run_split = [&] { return run_job(a, a.workers, run_dir, fmt::format("bench-split-{}", r + 1), split); };
    Pair p;
    if (r % 2 == 0) {
      p.whole = run_whole();
      p.split = run_split();
    } else {
      p.split = run_split();
      p.whole = run_whole();
    }
    p.throughput = p.split.samples_per_s / p.whole.samples_per_s;
    pairs.push_back(p);
  }
  std::vector<double> ratios;
  for (const auto& p : pairs) ratios.push_back(p.throughput);
  const Pair& median = pairs[median_index(ratios)];
  const double memory = median.split.peak_rss_mib / median.whole.peak_rss_mib;
  std::cout << fmt::format("\n{}: {} steps, {} worker(s), {} compute thread(s) each; a global batch of {} a step\n",
                           a.config, a.steps, a.workers, a.threads,
                           static_cast<std::int64_t>(a.batch) * a.micro_batches * a.workers);
  if (pairs.size() > 1) {
    std::cout << fmt::format("{} pairs of runs, micro-batched over whole samples/s per pair:", pairs.size());
    for (const auto& p : pairs) std::cout << fmt::format(" {:.3f}", p.throughput);
    std::cout << "\nthe pair with the median ratio:\n";
  }
  std::cout << fmt::format("{:<34} {:>12} {:>22}\n", "per worker and step", "samples/s", "peak memory (largest)");
  std::cout << fmt::format("{:<34} {:>12.1f} {:>18.1f} MiB\n", fmt::format("1 batch of {}", whole.batch),
                           median.whole.samples_per_s, median.whole.peak_rss_mib);
  std::cout << fmt::format("{:<34} {:>12.1f} {:>18.1f} MiB\n",
                           fmt::format("{} micro-batches of {}", split.micro_batches, split.batch),
                           median.split.samples_per_s, median.split.peak_rss_mib);
  std::cout << fmt::format("micro-batched / whole: samples/s {:.3f}, peak memory {:.3f}\n", median.throughput, memory);
  if (!a.json.empty()) {
    nlohmann::json per_pair = nlohmann::json::array();
    for (const auto& p : pairs) per_pair.push_back(p.throughput);
    const nlohmann::json out{{"benchmark", "accumulate"}, {"config", a.config}, {"steps", a.steps},
                             {"workers", a.workers}, {"threads_per_worker", a.threads},
                             {"batch", a.batch}, {"micro_batches", a.micro_batches},
                             {"samples_per_s_whole", median.whole.samples_per_s},
                             {"samples_per_s_micro_batched", median.split.samples_per_s},
                             {"peak_rss_mib_whole", median.whole.peak_rss_mib},
                             {"peak_rss_mib_micro_batched", median.split.peak_rss_mib},
                             {"throughput_ratio", median.throughput}, {"throughput_ratio_per_pair", per_pair},
                             {"peak_memory_ratio", memory}};
    write_output(a.json, out.dump(1) + "\n");
  }
  fs::remove_all(run_dir);
  return 0;
}

int run_bench(int argc, char** argv, Bench bench) {
  try {
    const Args a = parse(argc, argv, bench);
    if (a.help) {
      std::cout << (bench == Bench::accumulate ? kAccumulateUsage : kUsage);
      return 0;
    }
    return bench == Bench::accumulate ? run_accumulate(a) : run_pairs(a);
  } catch (const ConfigError& e) {
    std::cerr << "aiacc-bench " << bench_name(bench) << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "aiacc-bench " << bench_name(bench) << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

int run_train_bench(int argc, char** argv) { return run_bench(argc, argv, Bench::train); }

int run_accumulate_bench(int argc, char** argv) { return run_bench(argc, argv, Bench::accumulate); }

}  // namespace aiacc::bench
