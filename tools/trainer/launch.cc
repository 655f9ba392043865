#include "tools/trainer/launch.h"

#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/net/context.h"
#include "core/net/rendezvous_server.h"
#include "core/util/cpus.h"
#include "ring/shared_memory.h"
#include "tools/trainer/stop_signal.h"

namespace aiacc::trainer {

namespace {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// `text` as a whole decimal number in [low, high], or nullopt.
std::optional<long> whole_number(const std::string& text, long low, long high) {
  // from_chars, not strtol: " 29612" or "+1" would pass here and fail later, far from the cause.
  long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < low || value > high) return std::nullopt;
  return value;
}

// MASTER_ADDR (or cluster.master_addr): a host name or IPv4 address alone. "host:port" and IPv6
// literals would be glued to the port into an address ZeroMQ never reaches, and every rank
// would wait the whole start timeout for "no answer".
void check_master_addr(const std::string& host, const char* source) {
  std::string problem;
  if (host.empty()) {
    problem = "is empty";
  } else if (std::any_of(host.begin(), host.end(), [](unsigned char c) { return std::isspace(c) != 0; })) {
    problem = "contains white space";
  } else if (host.find(':') != std::string::npos) {
    problem = host.find(':') == host.rfind(':')
                  ? "has a port: give the host alone, and the port in MASTER_PORT (or cluster.master_port)"
                  : "is an IPv6 address, which the rendezvous does not support: give an IPv4 address or a host name";
  }
  if (!problem.empty()) throw ConfigError(fmt::format("{}='{}' {}", source, host, problem));
}

int env_int(const char* name, const std::string& text) {
  const auto value = whole_number(text, 0, 1'000'000);
  if (!value) throw ConfigError(fmt::format("environment variable {}='{}' is not a rank or count", name, text));
  return static_cast<int>(*value);
}

// A launcher's (rank, size, local rank) variables, when its rank variable is set.
struct LauncherVars {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
};
// Innermost launcher first: mpirun and torchrun run under srun (`srun torchrun ...`, one task
// per node), whose variables then describe the nodes, not this process.
constexpr LauncherVars kLaunchers[] = {
    {"local", "AIACC_RANK", "AIACC_WORLD_SIZE", "AIACC_LOCAL_RANK"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

// aiacc-train's exit status for a configuration or usage error (tools/aiacc_train.cc).
constexpr int kConfigErrorStatus = 2;

std::atomic<int> g_forwarded_signal{0};
void remember_signal(int signal) { g_forwarded_signal.store(signal); }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("was killed by signal {} ({})", sig, strsignal(sig));
  }
  return fmt::format("ended with wait status {}", status);
}

int exit_status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

std::string rank_name(const ClusterOptions& cluster, int rank) {
  return rank < cluster.workers ? fmt::format("worker {}", rank)
                                : fmt::format("server {}", rank - cluster.workers);
}

std::string ProcessRole::name(const ClusterOptions& c) const { return rank_name(c, rank); }

std::optional<InjectedFault> injected_fault(int rank) {
  const char* spec = std::getenv("AIACC_TEST_KILL_AT");
  if (spec == nullptr) return std::nullopt;
  int at_rank = -1;
  long long step = -1;
  char how[16] = "kill";
  const int fields = std::sscanf(spec, "%d:%lld:%15s", &at_rank, &step, how);
  const std::string_view kind = how;
  if (fields < 2 || (kind != "kill" && kind != "stop" && kind != "term")) {
    throw ConfigError(fmt::format("AIACC_TEST_KILL_AT='{}': expected RANK:STEP[:kill|stop|term]", spec));
  }
  if (at_rank != rank || restart_attempt() != 0) return std::nullopt;
  return InjectedFault{step, kind == "stop" ? SIGSTOP : kind == "term" ? SIGTERM : SIGKILL};
}

int restart_attempt() {
  const char* value = std::getenv(kRestartCountVariable);
  return value != nullptr ? std::max(0, std::atoi(value)) : 0;
}

std::optional<ProcessRole> role_from_environment(const ClusterOptions& cluster) {
  for (const auto& vars : kLaunchers) {
    // launcher: local ignores outer launchers' variables (this process starts the job itself),
    // but its own children still find their ranks in AIACC_RANK: without them every child
    // would start a job of its own, and each of theirs another.
    if (cluster.launcher == "local" && std::string_view(vars.launcher) != "local") continue;
    auto rank_text = env(vars.rank);
    if (!rank_text) continue;
    auto size_text = env(vars.size);
    if (!size_text) {
      throw ConfigError(fmt::format("{} is set ({}) but {} is not: cannot tell the world size",
                                    vars.rank, *rank_text, vars.size));
    }
    ProcessRole role;
    role.launcher = vars.launcher;
    role.rank = env_int(vars.rank, *rank_text);
    role.world_size = env_int(vars.size, *size_text);
    if (auto local = env(vars.local_rank)) role.local_rank = env_int(vars.local_rank, *local);
    if (role.world_size != cluster.world_size()) {
      throw ConfigError(fmt::format(
          "{} says the job has {} processes ({}={}) but the config's cluster section needs {} "
          "(cluster.workers {} + cluster.servers {}); start {} processes or change the config",
          role.launcher, role.world_size, vars.size, role.world_size, cluster.world_size(),
          cluster.workers, cluster.servers, cluster.world_size()));
    }
    if (role.rank >= role.world_size) {
      throw ConfigError(fmt::format("{}={} is outside the world of {}", vars.rank, role.rank,
                                    role.world_size));
    }
    if (role.launcher == "local") {
      auto rendezvous = env("AIACC_RENDEZVOUS");
      if (!rendezvous) throw ConfigError("AIACC_RANK is set but AIACC_RENDEZVOUS is not");
      role.rendezvous = *rendezvous;
      return role;
    }
    const auto master_addr = env("MASTER_ADDR");
    const std::string host = master_addr.value_or(cluster.master_addr);
    check_master_addr(host, master_addr ? "environment variable MASTER_ADDR" : "cluster.master_addr");
    const std::string port = env("MASTER_PORT").value_or(std::to_string(cluster.master_port));
    if (!whole_number(port, 1, 65535)) {
      throw ConfigError(fmt::format("environment variable MASTER_PORT='{}' is not a TCP port (1-65535)", port));
    }
    role.rendezvous = host + ":" + port;
    role.serves_rendezvous = role.rank == 0;
    return role;
  }
  // A torchrun-style world without a rank (a hand-written manifest that forgot RANK) would make
  // every process start a whole local job of its own.
  // (WORLD_SIZE=1, which some environments export for any process, starts a one-process job.)
  if (cluster.launcher != "local") {
    if (auto size = env("WORLD_SIZE"); size && *size != "1") {
      throw ConfigError(fmt::format("WORLD_SIZE is set ({}) but RANK is not: a torchrun-style launch gives every "
                                    "process RANK and WORLD_SIZE (with MASTER_ADDR and MASTER_PORT); set RANK, or "
                                    "unset WORLD_SIZE (or set cluster.launcher: local) to start the job here",
                                    *size));
    }
  }
  return std::nullopt;
}

std::optional<net::CurveKeys> job_curve_keys(const ClusterOptions& cluster, const ProcessRole& role) {
  if (!cluster.security.curve) {
    if (role.rank == 0) {
      log::get("cluster")->warn("cluster.security.curve is false: the job's connections are "
                                "neither authenticated nor encrypted (trusted networks only)");
    }
    return std::nullopt;
  }
  auto token = net::job_token_from_environment(cluster.security.token_file);
  if (!token) {
    throw ConfigError(fmt::format(
        "{} (started by {}) has no job token, which cluster.security.curve needs: give every "
        "process of the job the same token in {} (e.g. export {}=$(head -c 32 /dev/urandom | "
        "od -An -tx1 | tr -d ' \\n') before mpirun -x {} / srun), or in the file named by "
        "cluster.security.token_file; or set cluster.security.curve: false on a trusted network",
        role.name(cluster), role.launcher.empty() ? "no launcher" : role.launcher,
        net::kJobTokenVariable, net::kJobTokenVariable, net::kJobTokenVariable));
  }
  return net::CurveKeys::from_token(*token);
}

namespace {

// Starts every process of the job once, supervises them until all have ended, and returns how
// the job ended. `forwarded` reports a stop signal passed on to the processes (a user's stop,
// never restarted).
LaunchResult run_job_once(const ClusterOptions& cluster, std::vector<char*>& args,
                          const std::vector<std::string>& base_env, net::RendezvousServer& rendezvous,
                          int attempt, int& forwarded, bool ranks_stop_on_signal) {
  auto log = log::get("launcher");
  const int world = cluster.world_size();
  const std::string rendezvous_address = fmt::format("127.0.0.1:{}", rendezvous.port());

  // Everything the children need is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed (this process has ZeroMQ threads).
  std::vector<std::vector<std::string>> child_env(static_cast<std::size_t>(world), base_env);
  std::vector<std::vector<char*>> child_envp(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    auto& e = child_env[static_cast<std::size_t>(r)];
    e.push_back(fmt::format("AIACC_RANK={}", r));
    e.push_back(fmt::format("AIACC_WORLD_SIZE={}", world));
    e.push_back(fmt::format("AIACC_LOCAL_RANK={}", r));
    e.push_back(fmt::format("AIACC_LOCAL_WORLD_SIZE={}", world));
    e.push_back(fmt::format("AIACC_RENDEZVOUS={}", rendezvous_address));
    e.push_back(fmt::format("{}={}", kRestartCountVariable, attempt));
    for (auto& s : e) child_envp[static_cast<std::size_t>(r)].push_back(s.data());
    child_envp[static_cast<std::size_t>(r)].push_back(nullptr);
  }

  std::vector<pid_t> pids(static_cast<std::size_t>(world), -1);
  std::vector<bool> running(static_cast<std::size_t>(world), false);
  LaunchResult result;
  // After a failure: ranks that take SIGTERM as a request to checkpoint (ranks_stop_on_signal)
  // could not agree on a step without the failed one; SIGTERM used to end them at once, as
  // SIGKILL does.
  const int failure_signal = ranks_stop_on_signal ? SIGKILL : SIGTERM;
  auto stop_all = [&](int signal) {
    for (int r = 0; r < world; ++r) {
      if (running[static_cast<std::size_t>(r)]) kill(pids[static_cast<std::size_t>(r)], signal);
    }
  };
  // Cores this launcher may use, in order: process r gets cores[r % n].
  const std::vector<int> cores = cluster.pin_cores ? util::allowed_cpus() : std::vector<int>{};
  const pid_t launcher_pid = getpid();
  for (int r = 0; r < world; ++r) {
    cpu_set_t pinned;
    CPU_ZERO(&pinned);
    if (!cores.empty()) CPU_SET(cores[static_cast<std::size_t>(r) % cores.size()], &pinned);
    const pid_t pid = fork();
    if (pid < 0) {
      result = {1, fmt::format("cannot start {}: fork failed: {}", rank_name(cluster, r), std::strerror(errno))};
      break;
    }
    if (pid == 0) {
      // A launcher killed outright (SIGKILL, the OOM killer) runs no cleanup: its processes get
      // SIGTERM from the kernel rather than train on unsupervised (with train.checkpoint.on_signal
      // they stop at their next check, with a checkpoint). (The forking thread is the launcher's
      // main thread, whose end is what the kernel watches.) A launcher gone before the call
      // would go unnoticed, hence the check after it.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher_pid) _exit(1);
      if (ranks_stop_on_signal) setpgid(0, 0);
      if (!cores.empty()) sched_setaffinity(0, sizeof pinned, &pinned);
      execve("/proc/self/exe", args.data(), child_envp[static_cast<std::size_t>(r)].data());
      _exit(127);
    }
    pids[static_cast<std::size_t>(r)] = pid;
    running[static_cast<std::size_t>(r)] = true;
  }
  log->info("started {} workers and {} parameter-server shards as local processes (rendezvous {})",
            cluster.workers, cluster.servers, rendezvous_address);

  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> kill_at;
  if (result.exit_status != 0) {
    stop_all(failure_signal);
    kill_at = Clock::now() + std::chrono::seconds(10);
  }
  int alive = 0;
  for (bool r : running) alive += r ? 1 : 0;
  int signals_forwarded = 0;
  // A rank that exited with a configuration error after another's failure (whose own failure
  // may be only a consequence: a peer's connection gone): the job is misconfigured all the same.
  std::string later_config_error;
  while (alive > 0) {
    if (int sig = g_forwarded_signal.exchange(0); sig != 0) {
      ++signals_forwarded;
      if (ranks_stop_on_signal && signals_forwarded == 1) {
        log->warn("got signal {} ({}): the workers stop at their next check and save a checkpoint "
                  "(train.checkpoint.on_signal); a second signal stops them at once", sig, strsignal(sig));
      } else {
        log->warn("got signal {} ({}): stopping the job", sig, strsignal(sig));
        if (!kill_at) kill_at = Clock::now() + std::chrono::seconds(10);
      }
      stop_all(sig);
      forwarded = sig;
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < world; ++r) {
        if (pids[static_cast<std::size_t>(r)] != pid || !running[static_cast<std::size_t>(r)]) continue;
        running[static_cast<std::size_t>(r)] = false;
        --alive;
        // A rank that died between creating a shared-memory segment and every local rank
        // mapping it leaves the name linked (a killed process runs no destructors).
        if (const int removed = ring::remove_segments_of(pid); removed > 0) {
          log->info("removed {} shared-memory segment(s) {} (pid {}) left behind", removed, rank_name(cluster, r), pid);
        }
        const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        // A rank that stopped on a signal after its checkpoint (not killed by it): the others
        // stop at the same step on their own.
        const bool stopped = WIFEXITED(status) && is_stopped_exit_status(WEXITSTATUS(status));
        if (stopped && result.exit_status == 0 && forwarded == 0) {
          // The first to exit, not necessarily the one the signal reached (the workers' log names
          // those: "stopped by signal N on k of n workers [and a parameter-server shard]").
          result = {WEXITSTATUS(status),
                    fmt::format("on a stop signal, with a checkpoint ({} exited first: pid {}, status {})",
                                rank_name(cluster, r), pid, WEXITSTATUS(status)),
                    true};
          log->warn("{}", result.failure);
        } else if (failed && !stopped && (result.exit_status == 0 || result.stopped) &&
                   (forwarded == 0 || (ranks_stop_on_signal && signals_forwarded == 1))) {
          // (After one forwarded signal the ranks are saving a checkpoint: a rank that fails
          // meanwhile, a full disk or the OOM killer, fails the job, which then has none.)
          result.exit_status = exit_status_of(status);
          result.stopped = false;
          result.failure = fmt::format("{} (pid {}) {}", rank_name(cluster, r), pid, describe_status(status));
          // The first process to exit may be one that only heard of another's failure at the
          // store: name the failure that came first, and whose it was.
          if (const net::RendezvousServer::Abort first = rendezvous.first_abort(); first.rank == r) {
            result.failure += ": " + first.reason;
          } else if (first.rank >= 0) {
            result.failure +=
                fmt::format(" (the first failure, {}'s: {})", rank_name(cluster, first.rank), first.reason);
          }
          log->error("{}; stopping the other processes", result.failure);
          stop_all(failure_signal);
          kill_at = Clock::now() + std::chrono::seconds(10);
        } else if (failed) {
          log->info("{} (pid {}) {}", rank_name(cluster, r), pid, describe_status(status));
          if (WIFEXITED(status) && WEXITSTATUS(status) == kConfigErrorStatus && forwarded == 0 &&
              later_config_error.empty()) {
            later_config_error = fmt::format("{} (pid {}) {}, a configuration error", rank_name(cluster, r), pid,
                                             describe_status(status));
          }
        }
      }
      continue;
    }
    if (kill_at && Clock::now() >= *kill_at) {
      log->warn("processes still running 10 s after being told to stop: sending SIGKILL");
      stop_all(SIGKILL);
      kill_at = Clock::now() + std::chrono::hours(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!later_config_error.empty() && !result.stopped && result.exit_status != 0 &&
      result.exit_status != kConfigErrorStatus) {
    result.exit_status = kConfigErrorStatus;
    result.failure += "; " + later_config_error;
  }
  return result;
}

}  // namespace

LaunchResult launch_local(const ClusterOptions& cluster, const std::vector<std::string>& argv,
                          bool ranks_stop_on_signal) {
  auto log = log::get("launcher");
  // A process this launcher started never launches again (they would multiply without end).
  if (const auto rank = env(kLaunchers[0].rank)) {
    throw InternalError(fmt::format("a rank of a local launcher ({}={}) tried to start a job "
                                    "of its own instead of joining its launcher's",
                                    kLaunchers[0].rank, *rank));
  }
  // The job token: the user's (AIACC_JOB_TOKEN or the token file) or a fresh one, handed to
  // every child in AIACC_JOB_TOKEN. The launcher's rendezvous store is secured with it too.
  std::optional<std::string> token;
  std::optional<net::CurveKeys> curve;
  if (cluster.security.curve) {
    token = net::job_token_from_environment(cluster.security.token_file);
    if (!token) token = net::generate_job_token();
    curve = net::CurveKeys::from_token(*token);
    log->info("job traffic authenticated and encrypted with CURVE (job key fingerprint {})",
              curve->fingerprint());
  }
  auto context = net::Context::create(1, std::move(curve));

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    if (entry.rfind("AIACC_RANK=", 0) == 0 || entry.rfind("AIACC_WORLD_SIZE=", 0) == 0 ||
        entry.rfind("AIACC_LOCAL_RANK=", 0) == 0 || entry.rfind("AIACC_RENDEZVOUS=", 0) == 0 ||
        entry.rfind("AIACC_JOB_TOKEN=", 0) == 0 || entry.rfind("AIACC_RESTART_COUNT=", 0) == 0 ||
        entry.rfind("AIACC_LOCAL_WORLD_SIZE=", 0) == 0) {
      continue;
    }
    base_env.push_back(std::move(entry));
  }
  // Idle OpenMP threads must not spin on cores another process of the job needs.
  if (!env("OMP_WAIT_POLICY")) base_env.push_back("OMP_WAIT_POLICY=PASSIVE");
  if (token) base_env.push_back(fmt::format("{}={}", net::kJobTokenVariable, *token));

  struct sigaction action {};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);

  LaunchResult result;
  int forwarded = 0;
  for (int attempt = 0;; ++attempt) {
    // A fresh store per attempt: the last one holds the failed attempt's ranks and keys.
    net::RendezvousServer rendezvous(context, "127.0.0.1", 0);
    result = run_job_once(cluster, args, base_env, rendezvous, attempt, forwarded, ranks_stop_on_signal);
    if (result.exit_status == 0 || forwarded != 0 || result.stopped || attempt >= cluster.max_restarts) break;
    if (result.exit_status == kConfigErrorStatus) {
      // A configuration error (a bad key, a schedule that does not fit): the same again. The
      // failure itself was logged when it came, and is the program's last line.
      log->error("not restarting after a configuration error (exit status {}): a restart would fail alike",
                 kConfigErrorStatus);
      break;
    }
    log->warn("restarting the job (restart {} of {}), from its newest complete checkpoint if it has one, after: {}",
              attempt + 1, cluster.max_restarts, result.failure);
    // A moment before the next attempt, so that what failed (a port, a mount) may come back;
    // a stop asked for meanwhile ends the job instead.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (const int signal = g_forwarded_signal.exchange(0); signal != 0) {
      forwarded = signal;
      break;
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (forwarded != 0 && result.exit_status == 0) {
    result = {128 + forwarded, fmt::format("stopped by signal {} ({})", forwarded, strsignal(forwarded)), true};
  }
  return result;
}

}  // namespace aiacc::trainer
