// aiacc-bench allreduce: allreduce time and bandwidth by message size, like nccl-tests
// (size, time, algbw = bytes / time, busbw = algbw * 2(n-1)/n), for aiacc's CPU collectives
// and, in the same run, OpenMPI's MPI_Allreduce over TCP and over shared memory, with ratios.
// The flags are in kAllreduceUsage below (aiacc-bench allreduce --help); `aiacc-bench --help`
// lists the subcommands.
//
// Ranks are local processes: this launcher starts the rendezvous store and `--ranks` copies of
// itself. Under tools/netemu (AIACC_NETEMU_* set), one launcher runs per emulated host, starts
// --ranks processes there, and host 0's launcher serves the store on its address.
// Timing: per size, a barrier, `warmup` untimed runs, then runs until ~--seconds have passed
// (at least 3); the time is rank 0's mean per run. --repeat R (3 by default) runs R sweeps of
// aiacc and of each OpenMPI transport, alternating, so a noisy spell of this shared machine
// hits both sides alike; each size reports the median time of each side with its [min-max],
// and the ratio of the medians (under tools/netemu one sweep: no OpenMPI there). --streams auto tunes the stream count
// (AutoTuner over 1, 2, 4, ... --max-streams) for each size before measuring it (column K).
// --pin on binds rank r to the (r mod n)-th of the n CPUs the launcher may use, as aiacc-train's
// cluster.pin_cores does (global ranks, so emulated hosts sharing this machine's CPUs do not all
// start on the first one), and runs OpenMPI bound the same way, one logical CPU per rank
// (--bind-to hwthread:overload-allowed --map-by hwthread:OVERSUBSCRIBE). --hierarchical off
// (the flat TCP ring even for ranks on one host) and --curve off are the fair comparison with
// OpenMPI over TCP.
// --timeout-s defaults to 60 s, not CommunicatorOptions' 300 s (sized for a slow peer's
// backward pass): a benchmark's collectives take well under a second, and a frozen rank should
// end the sweep with the TimeoutError naming it within a minute.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <algorithm>
#include <functional>
#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "core/net/message_memory.h"
#include "core/net/rendezvous_client.h"
#include "core/net/rendezvous_server.h"
#include "core/net/security.h"
#include "core/util/cpus.h"
#include "ring/allreduce.h"
#include "ring/auto_tuner.h"
#include "ring/broadcast.h"
#include "ring/barrier.h"
#include "ring/communicator.h"
#include "tools/bench/bench_args.h"
#include "tools/bench/ps_bench.h"
#include "tools/bench/train_bench.h"
#include "tools/bench/spread.h"

namespace {

using namespace aiacc;

// Streams per peer: as many as the trainer's cluster.ring.streams allows.
constexpr int kMaxStreams = 64;

constexpr std::string_view kUsage = R"(usage: aiacc-bench allreduce|ps|train|accumulate [options]
  allreduce   allreduce time and bandwidth by message size, against OpenMPI
  ps          parameter-server throughput and memory per row, against iperf3
  train       scaling efficiency of a job config, 1 worker against N
  accumulate  gradient accumulation: K micro-batches against one batch K times larger
aiacc-bench SUBCOMMAND --help lists the subcommand's options.
)";

constexpr std::string_view kAllreduceUsage = R"(usage: aiacc-bench allreduce [options]
Allreduce time, algbw and busbw by message size for --ranks local processes, and OpenMPI's
MPI_Allreduce in the same run (sweeps alternate between the two sides; medians reported).
  --ranks N                  ranks (processes) per host, 1 to 1024 (default 2)
  --streams K|auto           streams per peer, 1 to 64, or auto: tuned per size (default 1)
  --max-streams K            largest count --streams auto tries, 1 to 64 (default 8)
  --wire native|fp16|bf16    wire type of the reduced data (default native)
  --min-bytes SIZE           smallest size, 0 to 1T, rounded up to whole floats (a multiple
                             of 4, at least 4); sizes grow from it by 4x (default 4)
  --max-bytes SIZE           largest size, 4 to 1T (default 256M)
  --mpi tcp,shm|tcp|shm|none OpenMPI transports to compare with (default tcp,shm)
  --hierarchical on|off      shared memory within a host (on, default) or the flat TCP ring
  --chunk-bytes SIZE         ring pipeline chunk, at least 1K (default 1M)
  --halving-doubling-bytes SIZE
                             largest size halving-doubling serves (0: the ring for all)
  --rebalance RUNS           stream rebalancing period in runs, 0 for equal weights (default 4)
  --transport auto|tcp|zmq   the ring's links: plain sockets (tcp) or ZeroMQ channels (default auto)
  --spin-us N                microseconds a tcp wait polls before sleeping, -1 auto (default -1)
  --curve on|off             CURVE-encrypted connections, as aiacc-train by default (default off)
  --pin on|off               bind rank r to allowed CPU r mod n, OpenMPI alike (default off)
  --timeout-s SECONDS        seconds a collective may take before a rank fails naming the peer
                             it waited for, above 0 up to 86400 (default 60)
  --seconds S                timed seconds per size, above 0 up to 3600 (default 0.3)
  --repeat R                 alternating sweeps of each side, 1 to 100 (default 3)
  --no-check                 skip checking each rank's sums
  --json FILE                also write the results as JSON (checked first, written at the end)
  -h, --help                 this text
SIZE: bytes, whole, with an optional K, M, G or T (powers of 1024): 4, 64K, 1.5M, 1T.
Sizes whose buffers would not fit in this machine's memory are refused at once.
)";

struct Args {
  int ranks = 2;                 // per host
  std::string streams = "1";     // a number or "auto"
  int max_streams = 8;
  std::string wire = "native";
  bool hierarchical = true;
  std::int64_t halving_doubling_bytes = -1;  // -1: AllreduceTuning's default
  bool pin = false;
  int cpu = -1;  // a rank's CPU under --pin on (set by the launcher)
  std::int64_t chunk_bytes = 1 << 20;
  int rebalance = 4;  // StreamBalancer period in runs (0: equal weights)
  std::int64_t min_bytes = 4, max_bytes = std::int64_t{256} << 20;
  std::string min_bytes_text = "4", max_bytes_text = "256M";  // as given, for messages
  std::string mpi = "tcp,shm";
  std::string json;
  double seconds = 0.3;
  int repeat = 3;  // alternating sweeps of each side; medians reported
  bool check = true;
  double timeout_s = 60;  // CommunicatorOptions::timeout_s (see the top of this file)
  bool help = false;
  bool curve = false;  // CURVE-authenticated and -encrypted connections (the job default)
  std::string transport = "auto";
  int spin_us = -1;
  // Worker mode (set by the launcher).
  int rank = -1, world = 0;
  std::string master, interface = "127.0.0.1";
  int port = 29555;
};

std::vector<std::int64_t> sizes(const Args& a) {
  std::vector<std::int64_t> out;
  for (std::int64_t s = std::max<std::int64_t>(4, a.min_bytes); s <= a.max_bytes; s *= 4) out.push_back(s);
  return out;
}

Args parse(int argc, char** argv) {
  using bench::bytes_flag;
  using bench::integer_flag;
  using bench::on_off_flag;
  constexpr std::int64_t kMaxBytes = std::int64_t{1} << 40;
  Args a;
  for (int i = 2; i < argc; ++i) {
    const std::string key = argv[i];
    if (bench::is_help_flag(key)) {
      a.help = true;
      return a;
    }
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ConfigError(fmt::format("{} needs a value", key));
      return argv[++i];
    };
    auto integer = [&](std::int64_t min, std::int64_t max) { return static_cast<int>(integer_flag(key, value(), min, max)); };
    if (key == "--ranks") a.ranks = integer(1, 1024);
    else if (key == "--streams") {
      a.streams = value();
      if (a.streams != "auto") integer_flag(key, a.streams, 1, kMaxStreams);
    }
    else if (key == "--max-streams") a.max_streams = integer(1, kMaxStreams);
    else if (key == "--wire") {
      a.wire = value();
      ring::parse_wire_type(a.wire, "--wire");  // refused here rather than by every rank
    }
    else if (key == "--min-bytes") {
      a.min_bytes_text = value();
      a.min_bytes = (bytes_flag(key, a.min_bytes_text, 0, kMaxBytes) + 3) / 4 * 4;  // whole floats: the sizes move
    }
    else if (key == "--max-bytes") {
      a.max_bytes_text = value();
      a.max_bytes = bytes_flag(key, a.max_bytes_text, 4, kMaxBytes);
    }
    else if (key == "--mpi") a.mpi = value();
    else if (key == "--chunk-bytes") a.chunk_bytes = bytes_flag(key, value(), 1024, kMaxBytes);
    else if (key == "--halving-doubling-bytes") a.halving_doubling_bytes = bytes_flag(key, value(), 0, kMaxBytes);
    else if (key == "--rebalance") a.rebalance = integer(0, 1000000);
    else if (key == "--hierarchical") a.hierarchical = on_off_flag(key, value());
    else if (key == "--pin") a.pin = on_off_flag(key, value());
    else if (key == "--cpu") a.cpu = integer(-1, 1 << 20);
    else if (key == "--json") a.json = value();
    else if (key == "--seconds") a.seconds = bench::positive_flag(key, value(), 3600);
    else if (key == "--repeat") a.repeat = integer(1, 100);
    else if (key == "--timeout-s") a.timeout_s = bench::positive_flag(key, value(), 86400);
    else if (key == "--no-check") a.check = false;
    else if (key == "--curve") a.curve = on_off_flag(key, value());
    else if (key == "--transport") {
      a.transport = value();
      if (a.transport != "auto" && a.transport != "tcp" && a.transport != "zmq") {
        throw ConfigError(fmt::format("--transport takes auto, tcp or zmq, got '{}'", a.transport));
      }
    }
    else if (key == "--spin-us") a.spin_us = integer(-1, 10000000);
    else if (key == "--port") a.port = integer(0, 65535);
    else if (key == "--rank") a.rank = integer(0, 1 << 20);
    else if (key == "--world") a.world = integer(1, 1 << 20);
    else if (key == "--master") a.master = value();
    else if (key == "--interface") a.interface = value();
    else throw ConfigError(fmt::format("unknown option '{}' (see aiacc-bench allreduce --help)", key));
  }
  if (a.cpu >= 0 && a.rank < 0) throw ConfigError("--cpu is set by the launcher for its ranks; use --pin on");
  const std::vector<std::int64_t> all_sizes = sizes(a);
  if (all_sizes.empty()) {
    throw ConfigError(fmt::format("--min-bytes {} and --max-bytes {} leave no size to measure (sizes run from "
                                  "--min-bytes rounded up to whole floats, here {} bytes, up to --max-bytes by "
                                  "factors of 4)", a.min_bytes_text, a.max_bytes_text, std::max<std::int64_t>(4, a.min_bytes)));
  }
  if (a.rank < 0) {
    // Each rank holds a buffer of the largest size (run_rank); the collectives' own staging
    // comes on top.
    const double largest = static_cast<double>(all_sizes.back());
    bench::refuse_beyond_memory(fmt::format("--min-bytes {} to --max-bytes {} with --ranks {}", a.min_bytes_text,
                                            a.max_bytes_text, a.ranks),
                                a.ranks * largest,
                                fmt::format("each of {} ranks holds a buffer of the largest size, {:.0f} bytes", a.ranks,
                                            largest));
  }
  if (a.mpi != "none") {
    std::istringstream list(a.mpi);
    for (std::string t; std::getline(list, t, ',');) {
      if (t != "tcp" && t != "shm") {
        throw ConfigError(fmt::format("--mpi takes tcp, shm, tcp,shm or none, got '{}'", a.mpi));
      }
    }
  }
  if (!a.json.empty() && a.rank < 0) bench::check_output_path("--json", a.json);
  return a;
}

struct Row {
  std::int64_t bytes = 0;
  double seconds = 0;
  int streams = 1;  // active streams while timed (per size under --streams auto)
};

double busbw(double bytes, double seconds, int world) {
  return seconds > 0 ? bytes / seconds * 2.0 * (world - 1) / world / 1e9 : 0.0;
}

// --- worker: one rank ---
int run_rank(const Args& a, const std::shared_ptr<net::Context>& context, net::RendezvousClient& rendezvous);

int run_worker(const Args& a) {
  log::set_role(fmt::format("rank {}", a.rank));
  if (a.cpu >= 0) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(a.cpu, &cpus);
    if (sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
      throw IoError(fmt::format("rank {}: cannot pin to CPU {}: {}", a.rank, a.cpu, std::strerror(errno)));
    }
  }
  auto context = net::Context::create(std::getenv("AIACC_IO_THREADS") ? std::atoi(std::getenv("AIACC_IO_THREADS")) : 1,
                                     net::curve_keys_from_environment());
  net::RendezvousClient rendezvous(context, a.master);
  rendezvous.register_rank(a.rank, a.world, {}, net::deadline_after(120));
  try {
    return run_rank(a, context, rendezvous);
  } catch (const std::exception& e) {
    // Told to the store, so that ranks of other (emulated) hosts waiting there stop at once.
    try {
      rendezvous.abort(e.what(), dynamic_cast<const ConfigError*>(&e) != nullptr,
                       net::deadline_after(2));
    } catch (const std::exception&) {
      // The store may be gone with its host; this rank's own error is what matters.
    }
    throw;
  }
}

// How many runs of `run` fill `seconds`, from 3 to `at_most`: timed once on every rank, rank 0's
// count for all (every rank must run as many).
int agreed_runs(const std::shared_ptr<ring::Communicator>& comm, const std::function<void()>& run, double seconds,
                double at_most) {
  const auto start = net::Clock::now();
  run();
  std::vector<double> runs{std::clamp(seconds / std::max(1e-7, net::seconds_since(start)), 3.0, at_most)};
  ring::Broadcast(comm, ring::Buffer{runs.data(), 1, DType::f64}, 0).run();
  return static_cast<int>(runs[0]);
}

int run_rank(const Args& a, const std::shared_ptr<net::Context>& context, net::RendezvousClient& rendezvous) {
  const bool tune = a.streams == "auto";
  ring::CommunicatorOptions options;
  options.streams = tune ? a.max_streams : std::stoi(a.streams);
  options.interface = a.interface;
  options.transport = a.transport;
  options.spin_us = a.spin_us;
  options.timeout_s = a.timeout_s;
  auto comm = ring::Communicator::connect(context, rendezvous, a.rank, a.world, options, "bench");
  ring::AllreduceSpec spec;
  spec.wire = ring::parse_wire_type(a.wire, "--wire");
  spec.chunk_bytes = a.chunk_bytes;
  const auto all_sizes = sizes(a);
  std::vector<float> data(static_cast<std::size_t>(all_sizes.back() / 4 + 1));

  // --streams auto: the fastest stream count for each size (AutoTuner over 1, 2, 4, ...), as a
  // trainer tunes for its bucket size; recursive doubling (small sizes) uses one stream, and a
  // world of one has nothing to tune.
  auto tune_streams = [&](ring::Allreduce& allreduce, std::int64_t bytes) {
    if (!tune) return;
    if (std::string_view(allreduce.algorithm()) == "recursive doubling" || comm->world_size() == 1) {
      comm->set_active_streams(1);
      return;
    }
    std::vector<ring::TuningCandidate> candidates;
    for (int k = 1; k <= a.max_streams; k *= 2) candidates.push_back({bytes, k});
    // Back to back, as timed below: a pause between runs lets a rate-capped link refill its
    // burst allowance, which flattered some stream counts in tuning but not in the timed runs.
    ring::barrier(*comm, "tuning");
    // Measured runs per candidate: enough to fill a quarter of --seconds at the most streams (a
    // candidate with fewer takes longer), at least 3.
    comm->set_active_streams(a.max_streams);
    const int runs = agreed_runs(comm, [&] { allreduce.run(); }, a.seconds / 4, 1000);
    // Each candidate is timed as it will run: balanced. Its first runs rebalance the streams
    // after every run (streams that share a capped path get less), then `runs` are timed and
    // scored by their mean, as the timed runs below are. Three runs scored by their median rated
    // 8 streams faster than 4 at 1 MiB on an emulated 4 Gbit/s link in half of the sweeps, where 8
    // sustained 4% less (both 2.0-2.3 ms a run, three runs' spread about 10%).
    ring::AutoTuner tuner(comm, candidates, a.rebalance > 0 ? 4 : 1, runs, ring::TuningScore::kMean);
    ring::StreamBalancer balancer(comm, 1);
    comm->set_active_streams(tuner.current().streams);
    while (!tuner.done()) {
      const auto start = net::Clock::now();
      allreduce.run();
      const double seconds = net::seconds_since(start);
      if (a.rebalance > 0 && comm->active_streams() > 1) balancer.record(allreduce.stream_timings());
      if (tuner.record(seconds)) {
        comm->set_active_streams(tuner.current().streams);
        balancer.reset();
      }
    }
  };

  std::vector<Row> rows;
  std::map<std::string, bool> algorithms;
  for (std::int64_t bytes : all_sizes) {
    const std::int64_t count = std::max<std::int64_t>(1, bytes / 4);
    for (std::int64_t i = 0; i < count; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>((i + a.rank) % 7);
    // Checked as a sum; timed as an average, so repeated in-place runs stay finite (an fp16
    // wire would otherwise overflow and measure its fp32 fallback). Same cost either way.
    ring::AllreduceTuning tuning;
    tuning.hierarchical = a.hierarchical;
    if (a.halving_doubling_bytes >= 0) tuning.halving_doubling_bytes = a.halving_doubling_bytes;
    ring::Allreduce check_sum(comm, ring::Buffer{data.data(), count, DType::f32}, spec, tuning);
    ring::AllreduceSpec timed = spec;
    timed.op = ring::ReduceOp::kAverage;
    ring::Allreduce allreduce(comm, ring::Buffer{data.data(), count, DType::f32}, timed, tuning);
    algorithms[allreduce.algorithm()] = true;
    // Checked before the tuning's runs average the inputs in place: a sum of averages is exact
    // only on worlds of a power of two.
    check_sum.run();
    if (a.check) {
      // Inputs (i + r) % 7 summed over ranks: exact in float for these sizes.
      for (std::int64_t i = 0; i < count; i += std::max<std::int64_t>(1, count / 97)) {
        double expected = 0;
        for (int r = 0; r < a.world; ++r) expected += static_cast<double>((i + r) % 7);
        const double got = data[static_cast<std::size_t>(i)];
        if (std::abs(got - expected) > (spec.wire == ring::WireType::kNative ? 0.0 : 0.01 * expected + 0.01)) {
          throw InternalError(fmt::format("allreduce check failed at {} bytes, element {}: {} != {}", bytes, i, got, expected));
        }
      }
    }
    tune_streams(allreduce, bytes);
    ring::StreamBalancer balancer(comm, std::max(1, a.rebalance));
    auto once = [&] {
      allreduce.run();
      if (a.rebalance > 0 && comm->streams() > 1) balancer.record(allreduce.stream_timings());
    };
    ring::barrier(*comm, "size");
    const int iters = agreed_runs(comm, once, a.seconds, 10000);
    ring::barrier(*comm, "timed");
    const auto start = net::Clock::now();
    for (int it = 0; it < iters; ++it) once();
    rows.push_back({bytes, net::seconds_since(start) / iters, comm->active_streams()});
  }
  if (a.rank == 0) {
    std::string used;
    for (const auto& [name, _] : algorithms) used += (used.empty() ? "" : ", ") + name;
    std::cout << "RESULT "
              << nlohmann::json{{"streams", comm->active_streams()}, {"algorithms", used}, {"transport", comm->transport()}}.dump()
              << "\n";
    for (const Row& r : rows) {
      std::cout << "RESULT " << nlohmann::json{{"bytes", r.bytes}, {"seconds", r.seconds}, {"row_streams", r.streams}}.dump() << "\n";
    }
  }
  ring::barrier(*comm, "end");
  return 0;
}

// --- launcher ---
struct Child {
  pid_t pid;
  int out;  // read end of its stdout
};

Child spawn(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw IoError("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw IoError("fork failed");
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    std::vector<char*> args;
    for (const auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::perror("exec");
    _exit(127);
  }
  close(pipe_fds[1]);
  return {pid, pipe_fds[0]};
}

// This program's own path (ranks are copies of it; the MPI side sits next to it).
std::string self_path() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) throw IoError("readlink /proc/self/exe failed");
  return std::string(path, static_cast<std::size_t>(n));
}

std::string read_all(int fd) {
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  close(fd);
  return text;
}

// Collects "RESULT {json}" lines: the summary line and one per size.
struct Results {
  int streams = 1;
  std::string algorithms;
  std::string transport;
  std::vector<Row> rows;
};

Results parse_results(const std::string& text) {
  Results results;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("RESULT ", 0) != 0) {
      std::cout << line << "\n";
      continue;
    }
    const auto j = nlohmann::json::parse(line.substr(7));
    if (j.contains("streams")) {
      results.streams = j["streams"];
      results.algorithms = j.value("algorithms", "");
      results.transport = j.value("transport", "");
    } else {
      results.rows.push_back({j["bytes"], j["seconds"], j.value("row_streams", 1)});
    }
  }
  return results;
}

std::map<std::int64_t, double> run_mpi(const Args& a, const std::string& transport, int world) {
  std::string program = self_path();
  program = program.substr(0, program.rfind('/') + 1) + "aiacc-bench-mpi-allreduce";
  if (access(program.c_str(), X_OK) != 0) {
    std::cerr << "OpenMPI comparison skipped: " << program << " was not built (install libopenmpi-dev and reconfigure)\n";
    return {};
  }
  std::vector<std::string> argv = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", std::to_string(world)};
  if (a.pin) {
    argv.insert(argv.end(), {"--bind-to", "hwthread:overload-allowed", "--map-by", "hwthread:OVERSUBSCRIBE"});
  } else {
    argv.insert(argv.end(), {"--bind-to", "none"});
  }
  argv.insert(argv.end(), {"--mca", "btl", transport == "tcp" ? "tcp,self" : "vader,self"});
  if (transport == "tcp") {
    argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", "lo", "--mca", "pml", "ob1"});
  } else {
    argv.insert(argv.end(), {"--mca", "pml", "ob1"});
  }
  argv.insert(argv.end(), {program, std::to_string(a.min_bytes), std::to_string(a.max_bytes), std::to_string(a.seconds)});
  Child child = spawn(argv);
  const std::string text = read_all(child.out);
  int status = 0;
  waitpid(child.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << "OpenMPI (" << transport << ") failed; output:\n" << text;
    return {};
  }
  std::map<std::int64_t, double> out;
  for (const Row& r : parse_results(text).rows) out[r.bytes] = r.seconds;
  return out;
}

// One sweep of aiacc's ranks on this (emulated) host: rank 0's results on host 0, nullopt on
// other hosts; throws when a rank fails.
std::optional<Results> run_aiacc_sweep(const Args& a, int host, int world, const std::string& host0,
                                       const std::shared_ptr<net::Context>& context, bool netemu) {
  std::optional<net::RendezvousServer> server;
  int port = a.port;
  if (host == 0) {
    server.emplace(context, host0, netemu ? a.port : 0);
    port = server->port();
  }
  std::vector<Child> children;
  const std::string exe = self_path();
  // As aiacc-train's local launcher with cluster.pin_cores: rank r on allowed CPU r % n.
  const std::vector<int> cpus = a.pin ? util::allowed_cpus() : std::vector<int>{};
  if (a.pin && cpus.empty()) throw IoError("--pin on: the CPUs this process may use are unknown (sched_getaffinity failed)");
  for (int local = 0; local < a.ranks; ++local) {
    const int rank = host * a.ranks + local;
    const int cpu = cpus.empty() ? -1 : cpus[static_cast<std::size_t>(rank) % cpus.size()];
    std::vector<std::string> argv{exe, "allreduce", "--cpu", std::to_string(cpu), "--rank", std::to_string(rank),
                              "--world", std::to_string(world), "--master", fmt::format("{}:{}", host0, port),
                              "--interface", a.interface, "--streams", a.streams, "--max-streams",
                              std::to_string(a.max_streams), "--wire", a.wire, "--min-bytes", std::to_string(a.min_bytes),
                              "--max-bytes", std::to_string(a.max_bytes), "--seconds", std::to_string(a.seconds),
                              "--hierarchical", a.hierarchical ? "on" : "off", "--chunk-bytes", std::to_string(a.chunk_bytes),
                              "--rebalance", std::to_string(a.rebalance), "--transport", a.transport,
                              "--spin-us", std::to_string(a.spin_us), "--timeout-s", fmt::format("{}", a.timeout_s)};
    if (a.halving_doubling_bytes >= 0) {
      argv.insert(argv.end(), {"--halving-doubling-bytes", std::to_string(a.halving_doubling_bytes)});
    }
    children.push_back(spawn(argv));
  }
  // Each rank's output is read on a thread of its own, so that the ranks are waited for in the
  // order they end: the first to fail stops the others at once, where they would otherwise
  // wait for it (at the store, or in a collective) until their timeouts.
  std::vector<std::string> outputs(children.size());
  std::vector<std::thread> readers;
  for (std::size_t i = 0; i < children.size(); ++i) {
    readers.emplace_back([&outputs, &children, i] { outputs[i] = read_all(children[i].out); });
  }
  std::string failure;
  std::vector<bool> ended(children.size(), false);
  for (std::size_t left = children.size(); left > 0;) {
    bool reaped = false;
    for (std::size_t i = 0; i < children.size(); ++i) {
      int status = 0;
      if (ended[i] || waitpid(children[i].pid, &status, WNOHANG) != children[i].pid) continue;
      ended[i] = true;
      --left;
      reaped = true;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      if (!failure.empty()) continue;
      const int rank = host * a.ranks + static_cast<int>(i);
      failure = WIFSIGNALED(status)
                    ? fmt::format("rank {} was killed by signal {} ({})", rank, WTERMSIG(status), strsignal(WTERMSIG(status)))
                    : fmt::format("rank {} failed with exit status {} (its error is above)", rank, WEXITSTATUS(status));
      for (std::size_t j = 0; j < children.size(); ++j) {
        if (!ended[j]) kill(children[j].pid, SIGKILL);
      }
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& reader : readers) reader.join();
  if (!failure.empty()) throw Error(failure + "; the other ranks of this host were stopped");
  if (host != 0) return std::nullopt;
  return parse_results(outputs[0]);
}

using bench::Spread;

std::string range_us(const Spread& s, std::size_t runs) {
  return runs > 1 ? fmt::format("[{:.0f}-{:.0f}]", s.min * 1e6, s.max * 1e6) : std::string();
}

int run_launcher(Args a) {
  const char* host_env = std::getenv("AIACC_NETEMU_HOST");
  const int host = host_env ? std::atoi(host_env) : 0;
  const int hosts = host_env ? std::atoi(std::getenv("AIACC_NETEMU_HOSTS")) : 1;
  std::string host0 = "127.0.0.1";
  if (host_env) {
    a.interface = std::getenv("AIACC_NETEMU_ADDR");
    const std::string all = std::getenv("AIACC_NETEMU_ADDRS");
    host0 = all.substr(0, all.find(','));
    a.repeat = 1;  // the hosts' launchers would have to agree on every sweep's store; no OpenMPI here
  }
  const int world = a.ranks * hosts;
  // --curve on: the ranks (which inherit the environment) and the store use the job's keys.
  if (a.curve && std::getenv(net::kJobTokenVariable) == nullptr) {
    setenv(net::kJobTokenVariable, net::generate_job_token().c_str(), 1);
  }
  if (!a.curve) unsetenv(net::kJobTokenVariable);
  auto context = net::Context::create(1, net::curve_keys_from_environment());
  std::vector<std::string> transports;
  if (a.mpi != "none" && !host_env) {
    std::istringstream list(a.mpi);
    for (std::string t; std::getline(list, t, ',');) transports.push_back(t);
  }
  // Sweeps alternate between the two sides: aiacc, then each OpenMPI transport, R times.
  std::vector<Results> sweeps;
  std::map<std::string, std::map<std::int64_t, std::vector<double>>> mpi_times;
  for (int round = 0; round < a.repeat; ++round) {
    std::optional<Results> results;
    try {
      results = run_aiacc_sweep(a, host, world, host0, context, host_env != nullptr);
    } catch (const Error& e) {
      std::cerr << e.what() << "\n";
      return 1;
    }
    if (host != 0) continue;
    sweeps.push_back(std::move(*results));
    for (const std::string& t : transports) {
      for (const auto& [bytes, seconds] : run_mpi(a, t, world)) mpi_times[t][bytes].push_back(seconds);
    }
  }
  if (host != 0) return 0;
  const Results& results = sweeps.front();
  const bool tuned = a.streams == "auto";
  const int streams = tuned ? a.max_streams : results.streams;
  const std::size_t runs = sweeps.size();

  std::cout << fmt::format("# aiacc allreduce: {} ranks ({} host{}), {}{} stream{}{}, wire {}, fp32, transport {}; algorithms: {}\n",
                           world, hosts, hosts == 1 ? "" : "s", tuned ? "up to " : "", streams, streams == 1 ? "" : "s",
                           tuned ? " (powers of two) auto-tuned per size (K)" : "", a.wire, results.transport, results.algorithms);
  if (runs > 1) {
    std::cout << fmt::format("# {} alternating sweeps of each side: median times, [min-max] in us, busbw and ratio "
                             "from the medians\n", runs);
  }
  std::cout << fmt::format("{:>12} {:>11} {:>9} {:>9}", "size(B)", "time(us)", "algbw", "busbw");
  if (runs > 1) std::cout << fmt::format(" {:>17}", "aiacc range");
  if (tuned) std::cout << fmt::format(" {:>3}", "K");
  for (const auto& t : transports) {
    std::cout << fmt::format(" {:>12}", "mpi-" + t + "(us)");
    if (runs > 1) std::cout << fmt::format(" {:>17}", "range");
    std::cout << fmt::format(" {:>9} {:>7}", "busbw", "ratio");
  }
  std::cout << "   (GB/s; ratio = aiacc busbw / OpenMPI busbw)\n";
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < results.rows.size(); ++i) {
    const Row& r = results.rows[i];
    std::vector<double> times;
    for (const Results& sweep : sweeps) {
      if (i < sweep.rows.size()) times.push_back(sweep.rows[i].seconds);
    }
    const Spread ours = bench::spread_of(times);
    const double alg = static_cast<double>(r.bytes) / ours.median / 1e9;
    const double bus = busbw(static_cast<double>(r.bytes), ours.median, world);
    std::cout << fmt::format("{:>12} {:>11.1f} {:>9.3f} {:>9.3f}", r.bytes, ours.median * 1e6, alg, bus);
    if (runs > 1) std::cout << fmt::format(" {:>17}", range_us(ours, runs));
    if (tuned) std::cout << fmt::format(" {:>3}", r.streams);
    nlohmann::json j{{"bytes", r.bytes}, {"time_us", ours.median * 1e6}, {"time_us_min", ours.min * 1e6},
                     {"time_us_max", ours.max * 1e6}, {"repeats", runs}, {"algbw_gbs", alg}, {"busbw_gbs", bus},
                     {"ranks", world}, {"hosts", hosts}, {"streams", r.streams}, {"wire", a.wire},
                     {"transport", results.transport}};
    for (const auto& t : transports) {
      const auto it = mpi_times[t].find(r.bytes);
      if (it == mpi_times[t].end() || it->second.empty()) {
        std::cout << fmt::format(" {:>12}", "-");
        if (runs > 1) std::cout << fmt::format(" {:>17}", "-");
        std::cout << fmt::format(" {:>9} {:>7}", "-", "-");
        continue;
      }
      const Spread theirs = bench::spread_of(it->second);
      const double mb = busbw(static_cast<double>(r.bytes), theirs.median, world);
      std::cout << fmt::format(" {:>12.1f}", theirs.median * 1e6);
      if (runs > 1) std::cout << fmt::format(" {:>17}", range_us(theirs, it->second.size()));
      std::cout << fmt::format(" {:>9.3f} {:>7.2f}", mb, mb > 0 ? bus / mb : 0.0);
      j["mpi_" + t] = {{"time_us", theirs.median * 1e6}, {"time_us_min", theirs.min * 1e6},
                       {"time_us_max", theirs.max * 1e6}, {"busbw_gbs", mb}, {"ratio", mb > 0 ? bus / mb : 0.0}};
    }
    std::cout << "\n";
    out.push_back(j);
  }
  if (!a.json.empty()) {
    bench::write_output(a.json, out.dump(1) + "\n");
    std::cout << "wrote " << a.json << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  aiacc::net::keep_freed_message_memory();  // for every sub-command and every rank process
  try {
    const std::string command = argc >= 2 ? argv[1] : "";
    if (command == "ps") return aiacc::bench::run_ps_bench(argc, argv);
    if (command == "train") return aiacc::bench::run_train_bench(argc, argv);
    if (command == "accumulate") return aiacc::bench::run_accumulate_bench(argc, argv);
    if (aiacc::bench::is_help_flag(command)) {
      std::cout << kUsage;
      return 0;
    }
    if (command != "allreduce") {
      if (!command.empty()) std::cerr << "aiacc-bench: unknown subcommand '" << command << "'\n";
      std::cerr << kUsage;
      return 2;
    }
    const Args args = parse(argc, argv);
    if (args.help) {
      std::cout << kAllreduceUsage;
      return 0;
    }
    return args.rank >= 0 ? run_worker(args) : run_launcher(args);
  } catch (const aiacc::ConfigError& e) {
    std::cerr << "aiacc-bench: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "aiacc-bench: " << e.what() << "\n";
    return 1;
  }
}
