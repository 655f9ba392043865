// aiacc-bench ps: parameter-server throughput, shards and workers as local processes. The flags
// are in kUsage below (aiacc-bench ps --help).
//
// The launcher starts --servers shard processes (aiacc-ps-server's code, re-executing this
// program) and --workers worker processes. Every worker owns its own set of U unique ids per
// request size (warmed up once, so the timed requests look up existing rows) and, for each
// (dim, U, mode), meets the others at a barrier, runs requests for --seconds and reports.
// --curve on: every connection under the job's CURVE keys (aiacc-train's default); off: plain.
// --table-rows N: the workers' requests draw their ids from tables of N rows (created first),
// a different sample each request, each worker from its own N / --workers rows (so N is at
// least U x --workers); 0 (default): a worker asks for the same U ids every time.
// --unique-ids on (default): requests say their ids are unique (ps::RequestIds::unique), as the
// trainer's embedding tables do; off: the client de-duplicates them first, as for any caller.
// --inflight N: pull and push modes keep up to N requests per worker outstanding (the next one
// is split and sent while the shards work on the previous), as a trainer with
// prefetch and asynchronous pushes does (2, the default: its pull of the next batch's rows is
// in flight while the step's push is); 1 waits for each request before the next.
// Modes: pull (ids out, rows back), push (ids and gradient rows out, the optimiser runs on the
// shards), step (a pull then a push of the same ids: one training step's traffic). Figures are
// aggregates over workers: rows/s and payload GB/s, payload = ids (8 B) + rows (4 * dim B) per
// row and direction, headers excluded. The ceiling is loopback TCP as iperf3 measures it in the
// same run, before and after the sweep (this machine's speed drifts by a third within minutes),
// the higher of the two; the ratio is payload GB/s over that. --repeat R runs R sweeps, each
// with fresh shards and iperf3 run before, between and after them: a sweep's ratio is over the
// higher of the two runs around it, and the table shows medians with the ratio's [min-max].
// Memory (after the last sweep): one table of --memory-rows rows of
// --memory-dim floats is filled through the shards; the shards report their store bytes per row
// (slots + arena) and the launcher reads their resident-set growth, both against the raw
// (dim + optimiser state) * 4 bytes per row.
#include "tools/bench/ps_bench.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <deque>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/net/rendezvous_client.h"
#include "core/net/rendezvous_server.h"
#include "core/net/security.h"
#include "core/optim/sparse_row_optimizer.h"
#include "core/util/random.h"
#include "ps/client.h"
#include "ps/protocol.h"
#include "ps/server_process.h"
#include "tools/bench/bench_args.h"
#include "tools/bench/spread.h"

extern char** environ;

namespace aiacc::bench {
namespace {

constexpr std::string_view kUsage = R"(usage: aiacc-bench ps [options]
Parameter-server rows/s and payload GB/s for pull, push and step (pull + push) with shards and
workers as local processes, against loopback TCP as iperf3 measures it, then the memory per row.
  --servers N              shard processes, 1 to 1024 (default 2)
  --workers N              worker processes, 1 to 1024 (default 2)
  --dims D,D,...           floats per row, each 1 to 1048576 (default 8,16,64,128)
  --ids U,U,...            ids per request, each 1 to 2147483647 (default 1000,10000,100000)
  --modes M,M,...          pull, push, step (default pull,push,step)
  --seconds S              timed seconds per point, above 0 up to 3600 (default 0.5)
  --optimizer NAME         the shards' sparse rule: sgd, adam, adamw, adagrad, ftrl (default adagrad)
  --table-rows N           requests draw their ids from tables of N rows, created first, each
                           worker from its own N / --workers of them: 0, or at least the
                           largest --ids x --workers; 0: a worker asks for the same ids every
                           time (default 0)
  --unique-ids on|off      requests declare their ids unique, as the trainer's do (default on)
  --inflight N             pull/push requests outstanding per worker, 1 to 64 (default 2)
  --chunk-bytes N          row bytes per request chunk, 0 (no chunks) to 2^40 (default 262144)
  --server-threads T       OpenMP threads per shard, 0 to 1024; 0: cores / (servers + workers)
  --server-partitions P    store partitions per shard table, 0 to 4096; 0: the shard's default
  --memory-rows N          rows of the memory measurement, 0 (skip it) to 2^40 (default 10000000)
  --memory-dim D           floats per row of the memory measurement, 1 to 1048576 (default 16)
  --iperf-seconds S        whole seconds per iperf3 run, 0 (skip iperf3) to 3600 (default 2)
  --iperf-streams N        iperf3 streams, 1 to 128 (default 1)
  --repeat R               sweeps, each with fresh shards, medians reported, 1 to 100 (default 1)
  --curve on|off           CURVE-encrypted connections, as aiacc-train by default (default off)
  --json FILE              also write the results as JSON (checked first, written at the end)
  -h, --help               this text
Sizes whose buffers and rows would not fit in this machine's memory are refused at once.
)";

constexpr int kMaxDim = 1 << 20;
// Rows per pull when tables are filled (--table-rows, --memory-rows).
constexpr std::int64_t kFillChunk = 200000;

struct Args {
  bool help = false;
  bool curve = false;  // CURVE-authenticated and -encrypted connections (the job default)
  bool unique_ids = true;  // requests declared unique: the client skips its de-duplication
  int servers = 2;
  int workers = 2;
  std::vector<int> dims{8, 16, 64, 128};
  std::vector<int> ids{1000, 10000, 100000};
  std::vector<std::string> modes{"pull", "push", "step"};
  double seconds = 0.5;
  std::string optimizer = "adagrad";
  std::int64_t memory_rows = 10'000'000;
  int memory_dim = 16;
  int iperf_seconds = 2;  // whole seconds (iperf3 -t reads 0.5 as 0, which means forever); 0 skips iperf3
  int iperf_streams = 1;
  int server_threads = 0;  // 0: cores / (servers + workers), at least 1
  int server_partitions = 0;  // 0: the shard's default
  std::int64_t table_rows = 0;  // 0: each worker requests the same U ids; else drawn from this many
  std::int64_t chunk_bytes = ps::ClientOptions{}.chunk_bytes;
  int inflight = 2;
  int repeat = 1;
  std::string json;
  // Internal (child processes).
  std::string role;
  int worker = 0;
  std::string endpoints;
  std::string rendezvous;
  std::string out;
};

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<int> int_list(const std::string& key, const std::string& text, int min, int max, std::string_view example) {
  std::vector<int> out;
  for (const auto& item : list_flag(key, text, example)) out.push_back(static_cast<int>(integer_flag(key, item, min, max)));
  return out;
}

ps::TableConfig table_for(int dim, const std::string& optimizer, const std::string& name, int workers) {
  ps::TableConfig c;
  c.spec.name = name;
  c.spec.dim = dim;
  c.spec.seed = 1;
  c.optimizer.type = optimizer;
  c.optimizer.lr = 0.01;
  c.options.num_workers = workers;
  return c;
}

// Refuses, before any process starts, what the shards or the workers would refuse or could not
// hold: each dim's table as the shards validate it, and sizes whose buffers and rows (raw
// floats; the shards' stores take more) exceed this machine's memory, which would otherwise
// end in a bare std::bad_alloc or the kernel's OOM killer minutes in.
void check_launch(const Args& a) {
  for (int dim : a.dims) {
    try {
      ps::decode_table_config(ps::encode_table_config(table_for(dim, a.optimizer, "bench", a.workers)), "table");
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("--dims {} with --optimizer {}: the shards would refuse the table: {}", dim,
                                    a.optimizer, e.what()));
    }
  }
  const std::int64_t max_request = *std::max_element(a.ids.begin(), a.ids.end());
  // Each worker draws its requests from its own share of the table (request_id_sets); a share
  // smaller than a request would grow the table past --table-rows, measuring another table.
  if (a.table_rows > 0 && a.table_rows / a.workers < max_request) {
    throw ConfigError(fmt::format("--table-rows {} with --ids {} and --workers {}: each worker draws a request's {} "
                                  "distinct ids from its own {} of the table's rows; --table-rows takes 0 or at least "
                                  "{} (--ids x --workers)", a.table_rows, max_request, a.workers, max_request,
                                  a.table_rows / a.workers, max_request * a.workers));
  }
  const optim::SparseRowOptimizer optimizer(table_for(1, a.optimizer, "bench", a.workers).optimizer);
  auto row_bytes = [&](int dim) { return 4.0 * (dim + optimizer.state_floats(dim)); };
  double table_row_bytes = 0;  // a row of every dim's table
  for (int dim : a.dims) table_row_bytes += row_bytes(dim);
  const double max_dim = *std::max_element(a.dims.begin(), a.dims.end());
  const double max_ids = *std::max_element(a.ids.begin(), a.ids.end());
  const double workers = a.workers;
  // Each worker: --inflight row buffers and a gradient buffer of ids x dim floats, and its id
  // sets (8 of them with --table-rows); the shards: every worker's ids in every dim's table.
  const double buffers = workers * max_ids * ((a.inflight + 1) * 4.0 * max_dim + (a.table_rows > 0 ? 8 : 1) * 8.0);
  const double rows = a.table_rows > 0 ? 0.0 : workers * max_ids * table_row_bytes;
  refuse_beyond_memory(fmt::format("--ids {} with --dims {} and --workers {}", max_ids, max_dim, a.workers),
                       buffers + rows,
                       fmt::format("{} for the workers' request buffers, {} for the shards' rows", gib_text(buffers), gib_text(rows)));
  if (a.table_rows > 0) {
    const double table = static_cast<double>(a.table_rows) * table_row_bytes;
    const double pools = static_cast<double>(a.table_rows) * 8.0 + workers * static_cast<double>(kFillChunk) * 4.0 * max_dim;
    refuse_beyond_memory(fmt::format("--table-rows {}", a.table_rows), table + pools,
                         fmt::format("{} for the shards' rows of dims {}, {} for the workers' ids and buffers",
                                     gib_text(table), fmt::join(a.dims, ","), gib_text(pools)));
  }
  const double memory_table = static_cast<double>(a.memory_rows) * row_bytes(a.memory_dim);
  const double fill_buffer = static_cast<double>(kFillChunk) * (8.0 + 4.0 * a.memory_dim);
  refuse_beyond_memory(fmt::format("--memory-rows {} with --memory-dim {}", a.memory_rows, a.memory_dim),
                       memory_table + fill_buffer,
                       fmt::format("{} for the shards' rows, {} for the launcher's buffer", gib_text(memory_table), gib_text(fill_buffer)));
  if (!a.json.empty()) check_output_path("--json", a.json);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 2; i < argc; ++i) {
    const std::string key = argv[i];
    if (is_help_flag(key)) {
      a.help = true;
      return a;
    }
    if (i + 1 >= argc) throw ConfigError(fmt::format("{} needs a value", key));
    const std::string value = argv[++i];
    auto integer = [&](std::int64_t min, std::int64_t max) { return integer_flag(key, value, min, max); };
    if (key == "--servers") a.servers = static_cast<int>(integer(1, 1024));
    else if (key == "--workers") a.workers = static_cast<int>(integer(1, 1024));
    else if (key == "--dims") a.dims = int_list(key, value, 1, kMaxDim, "8,16");
    else if (key == "--ids") a.ids = int_list(key, value, 1, std::numeric_limits<int>::max(), "1000,10000");
    else if (key == "--modes") {
      a.modes = list_flag(key, value, "pull,push");
      for (const auto& m : a.modes) {
        if (m != "pull" && m != "push" && m != "step") {
          throw ConfigError(fmt::format("--modes takes pull, push and step, got '{}'", m));
        }
      }
    }
    else if (key == "--seconds") a.seconds = positive_flag(key, value, 3600);
    else if (key == "--optimizer") {
      if (std::find(std::begin(optim::kSparseRuleNames), std::end(optim::kSparseRuleNames), value) ==
          std::end(optim::kSparseRuleNames)) {
        throw ConfigError(fmt::format("--optimizer takes {}, got '{}'", fmt::join(optim::kSparseRuleNames, ", "), value));
      }
      a.optimizer = value;
    }
    else if (key == "--memory-rows") a.memory_rows = integer(0, std::int64_t{1} << 40);
    else if (key == "--memory-dim") a.memory_dim = static_cast<int>(integer(1, kMaxDim));
    else if (key == "--iperf-seconds") a.iperf_seconds = static_cast<int>(integer(0, 3600));
    else if (key == "--iperf-streams") a.iperf_streams = static_cast<int>(integer(1, 128));
    else if (key == "--server-threads") a.server_threads = static_cast<int>(integer(0, 1024));
    else if (key == "--server-partitions") a.server_partitions = static_cast<int>(integer(0, 4096));  // the shard's range
    else if (key == "--table-rows") a.table_rows = integer(0, std::int64_t{1} << 40);
    else if (key == "--chunk-bytes") a.chunk_bytes = integer(0, std::int64_t{1} << 40);
    else if (key == "--inflight") a.inflight = static_cast<int>(integer(1, 64));
    else if (key == "--repeat") a.repeat = static_cast<int>(integer(1, 100));
    else if (key == "--json") a.json = value;
    else if (key == "--curve") a.curve = on_off_flag(key, value);
    else if (key == "--unique-ids") a.unique_ids = on_off_flag(key, value);
    else if (key == "--role") a.role = value;
    else if (key == "--worker") a.worker = static_cast<int>(integer(0, 1024));
    else if (key == "--endpoints") a.endpoints = value;
    else if (key == "--rendezvous") a.rendezvous = value;
    else if (key == "--out") a.out = value;
    else throw ConfigError(fmt::format("unknown option '{}' (see aiacc-bench ps --help)", key));
  }
  if (a.role.empty()) check_launch(a);
  return a;
}

std::vector<std::int64_t> worker_ids(int worker, std::int64_t count) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    ids[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(
        mix64((static_cast<std::uint64_t>(worker) << 40) + static_cast<std::uint64_t>(i)));
  }
  return ids;
}

// The id sets a worker's requests of `count` ids take in turn. Without --table-rows: its own
// `count` ids, every request. With it: 8 sets of `count` distinct ids drawn from the worker's
// share of the table (table_rows / workers ids), so requests land all over a table as big as
// the user's rather than on rows the caches still hold from the last request.
std::vector<std::vector<std::int64_t>> request_id_sets(const Args& a, int count) {
  if (a.table_rows <= 0) return {worker_ids(a.worker, count)};
  // --table-rows is refused below --ids x --workers (check_launch): a pool grown past the worker's
  // share would create rows the user did not ask for.
  const std::int64_t pool_size = a.table_rows / a.workers;
  AIACC_CHECK_GE(pool_size, count, "--table-rows {} shared by {} workers", a.table_rows, a.workers);
  std::vector<std::int64_t> pool = worker_ids(a.worker, pool_size);
  Rng rng(static_cast<std::uint64_t>(a.worker) + 17, 0);
  std::vector<std::vector<std::int64_t>> sets;
  for (int s = 0; s < 8; ++s) {
    // A partial Fisher-Yates shuffle: the first `count` entries become a uniform sample.
    for (std::int64_t i = 0; i < count; ++i) {
      const auto j = i + static_cast<std::int64_t>(rng.uniform(0.0, 1.0) * static_cast<double>(pool_size - i));
      std::swap(pool[static_cast<std::size_t>(i)], pool[static_cast<std::size_t>(std::min(j, pool_size - 1))]);
    }
    sets.emplace_back(pool.begin(), pool.begin() + count);
  }
  return sets;
}

// Creates the rows of the worker's share of the table (all of them, in large pulls), so the
// timed requests look up existing rows.
void create_rows(ps::PsClient& client, const std::string& table, const Args& a, int dim) {
  const std::int64_t pool_size = std::max<std::int64_t>(a.table_rows / a.workers, 1);
  const std::vector<std::int64_t> pool = worker_ids(a.worker, pool_size);
  constexpr auto kChunk = static_cast<std::size_t>(kFillChunk);
  std::vector<float> rows(kChunk * static_cast<std::size_t>(dim));
  for (std::size_t begin = 0; begin < pool.size(); begin += kChunk) {
    const std::size_t n = std::min(kChunk, pool.size() - begin);
    client.wait(client.pull(table, std::span(pool).subspan(begin, n), rows.data(), 0));
  }
}

// ---- worker process: runs every point in order, meeting the others at barriers ----
int run_worker(const Args& a) {
  log::set_role(fmt::format("bench worker {}", a.worker));
  ps::ClientOptions options;
  options.endpoints = split(a.endpoints, ',');
  options.worker = a.worker;
  options.chunk_bytes = a.chunk_bytes;
  auto context = net::Context::create(1, net::curve_keys_from_environment());
  ps::PsClient client(options, context);
  net::RendezvousClient rendezvous(context, a.rendezvous);
  rendezvous.register_rank(a.worker, a.workers, {}, net::deadline_after(60));
  nlohmann::json results = nlohmann::json::array();
  int point = 0;
  const ps::RequestIds kind = a.unique_ids ? ps::RequestIds::unique : ps::RequestIds::may_repeat;
  for (int dim : a.dims) {
    const std::string table = fmt::format("bench_d{}", dim);
    client.create_table(table_for(dim, a.optimizer, table, a.workers));
    if (a.table_rows > 0) create_rows(client, table, a, dim);
    for (int count : a.ids) {
      const auto id_sets = request_id_sets(a, count);
      // One row buffer per request in flight (a pull writes into its own until waited for).
      std::vector<std::vector<float>> rows(static_cast<std::size_t>(a.inflight),
                                           std::vector<float>(static_cast<std::size_t>(count) * static_cast<std::size_t>(dim)));
      std::vector<float> grads(rows[0].size(), 1e-3f);
      for (const auto& ids : id_sets) {
        client.wait(client.pull(table, ids, rows[0].data(), 0, kind));  // warm-up: creates the rows
      }
      for (const auto& mode : a.modes) {
        rendezvous.barrier(fmt::format("start-{}", point), net::deadline_after(300));
        const auto start = std::chrono::steady_clock::now();
        double elapsed = 0;
        int iterations = 0;
        std::deque<ps::Ticket> pending;
        while (iterations < 3 || elapsed < a.seconds) {
          const auto& ids = id_sets[static_cast<std::size_t>(iterations) % id_sets.size()];
          if (mode == "step") {
            // A step's push needs its pull's rows: one step at a time.
            client.wait(client.pull(table, ids, rows[0].data(), 0, kind));
            client.wait(client.push(table, ids, grads.data(), 0.01, 0, kind));
          } else {
            // Up to --inflight requests outstanding: the next one is prepared and sent while
            // the shards work on the previous (as a trainer's prefetch and async push do).
            if (pending.size() == static_cast<std::size_t>(a.inflight)) {
              client.wait(pending.front());
              pending.pop_front();
            }
            auto& buffer = rows[static_cast<std::size_t>(iterations % a.inflight)];
            pending.push_back(mode == "pull" ? client.pull(table, ids, buffer.data(), 0, kind)
                                             : client.push(table, ids, grads.data(), 0.01, 0, kind));
          }
          ++iterations;
          elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
        for (const auto& ticket : pending) client.wait(ticket);
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double directions = mode == "step" ? 2.0 : 1.0;
        const double rows_moved = double(iterations) * count;
        results.push_back({{"point", point}, {"dim", dim}, {"ids", count}, {"mode", mode},
                           {"seconds", elapsed}, {"iterations", iterations},
                           {"rows", rows_moved * directions},
                           {"payload_bytes", rows_moved * directions * (8.0 + 4.0 * dim)}});
        rendezvous.barrier(fmt::format("end-{}", point), net::deadline_after(300));
        ++point;
      }
    }
  }
  write_output(a.out, results.dump() + "\n");
  return 0;
}

// ---- launcher ----
class Child {
 public:
  // `quiet`: stdout to /dev/null.
  explicit Child(const std::vector<std::string>& argv, bool quiet = false) {
    std::vector<char*> args;
    for (const auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (quiet) posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    const int status = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (status != 0) throw IoError(fmt::format("cannot start {}", argv[0]));
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }
  // Exit status once exited within `seconds`; throws Error naming `what` otherwise.
  int wait(double seconds, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw Error(fmt::format("{} did not finish within {:.0f} s", what, seconds));
  }

 private:
  pid_t pid_ = -1;
};

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

std::string wait_for_file(const std::filesystem::path& path, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path);
    std::string text;
    if (in >> text && !text.empty()) return text;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw TimeoutError(fmt::format("no endpoint in {} after {:.0f} s", path.string(), seconds));
}

std::int64_t rss_bytes(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// Loopback TCP bandwidth (GB/s) measured by iperf3, or a negative value when unavailable.
double measure_iperf(int seconds, int streams) {
  if (seconds <= 0) return -1;
  const int port = 20000 + static_cast<int>(::getpid() % 20000);
  std::optional<Child> server;
  try {
    server.emplace(std::vector<std::string>{"/usr/bin/iperf3", "-s", "-1", "-p", std::to_string(port), "-B", "127.0.0.1"}, true);
  } catch (const std::exception& e) {
    std::cerr << "aiacc-bench ps: cannot start iperf3 (apt-get install iperf3): " << e.what() << "\n";
    return -1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // timeout: a client that cannot finish (no server, a stuck connection) must not hang the bench.
  const std::string command = fmt::format("timeout {} iperf3 -c 127.0.0.1 -p {} -t {} -P {} -J 2>/dev/null",
                                          seconds + 10, port, seconds, streams);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  std::string output;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  ::pclose(pipe);
  try {
    const auto j = nlohmann::json::parse(output);
    return j.at("end").at("sum_received").at("bits_per_second").get<double>() / 8e9;
  } catch (const std::exception& e) {
    std::cerr << "aiacc-bench ps: could not read iperf3's result: " << e.what() << "\n";
    return -1;
  }
}

// Shard processes of one sweep (or of the memory measurement).
struct Shards {
  std::vector<std::unique_ptr<Child>> processes;
  std::vector<std::string> endpoints;
};

Shards start_shards(const Args& a, const std::string& exe, const std::filesystem::path& dir, int threads) {
  Shards shards;
  for (int k = 0; k < a.servers; ++k) {
    const auto file = dir / fmt::format("endpoint-{}", k);
    std::filesystem::remove(file);  // a previous sweep's
    std::vector<std::string> argv{exe, "ps", "--role", "server", "--shard", std::to_string(k),
                                  "--num-shards", std::to_string(a.servers), "--endpoint-file",
                                  file.string(), "--threads", std::to_string(threads),
                                  "--log-interval-s", "0"};
    if (a.server_partitions > 0) {
      argv.insert(argv.end(), {"--partitions", std::to_string(a.server_partitions)});
    }
    shards.processes.push_back(std::make_unique<Child>(std::move(argv)));
    shards.endpoints.push_back(wait_for_file(file, 60));
  }
  return shards;
}

void stop_shards(Shards& shards, const std::shared_ptr<net::Context>& context) {
  ps::ClientOptions options;
  options.endpoints = shards.endpoints;
  options.timeout_s = 30;
  ps::PsClient(options, context).shutdown_servers();
  for (std::size_t k = 0; k < shards.processes.size(); ++k) {
    shards.processes[k]->wait(30, fmt::format("shard {}", k));
  }
  shards.processes.clear();
}

// One point of one sweep, aggregated over the workers: every worker's rows over the slowest
// worker's time.
struct PointResult {
  int dim = 0;
  int ids = 0;
  std::string mode;
  double rows_per_s = 0;
  double gb_per_s = 0;
  double seconds = 0;
};

// Runs the workers through every (dim, ids, mode) point once against `shards`.
std::vector<PointResult> run_sweep(const Args& a, const std::string& exe, const std::filesystem::path& dir,
                                   const Shards& shards, const std::shared_ptr<net::Context>& context) {
  net::RendezvousServer rendezvous(context, "127.0.0.1", 0);
  std::vector<std::unique_ptr<Child>> workers;
  auto join = [](const auto& values) { return fmt::format("{}", fmt::join(values, ",")); };
  const std::string endpoint_list = join(shards.endpoints);
  const std::string modes = join(a.modes);
  for (int w = 0; w < a.workers; ++w) {
    workers.push_back(std::make_unique<Child>(std::vector<std::string>{
        exe, "ps", "--role", "worker", "--worker", std::to_string(w), "--workers",
        std::to_string(a.workers), "--endpoints", endpoint_list, "--rendezvous",
        rendezvous.endpoint(), "--dims", join(a.dims), "--ids", join(a.ids), "--modes", modes,
        "--seconds", fmt::format("{}", a.seconds), "--optimizer", a.optimizer, "--chunk-bytes",
        std::to_string(a.chunk_bytes), "--inflight", std::to_string(a.inflight), "--unique-ids",
        a.unique_ids ? "on" : "off", "--table-rows", std::to_string(a.table_rows), "--out",
        (dir / fmt::format("worker-{}.json", w)).string()}));
  }
  for (int w = 0; w < a.workers; ++w) {
    const int status = workers[static_cast<std::size_t>(w)]->wait(3600, fmt::format("worker {}", w));
    if (status != 0) throw Error(fmt::format("worker {} exited with status {}", w, status));
  }
  std::vector<nlohmann::json> per_worker;
  for (int w = 0; w < a.workers; ++w) {
    per_worker.push_back(nlohmann::json::parse(std::ifstream(dir / fmt::format("worker-{}.json", w))));
  }
  std::vector<PointResult> points;
  for (std::size_t p = 0; p < per_worker[0].size(); ++p) {
    double rows = 0, bytes = 0, seconds = 0;
    for (const auto& w : per_worker) {
      rows += w[p].at("rows").get<double>();
      bytes += w[p].at("payload_bytes").get<double>();
      seconds = std::max(seconds, w[p].at("seconds").get<double>());
    }
    const auto& first = per_worker[0][p];
    points.push_back({first.at("dim").get<int>(), first.at("ids").get<int>(), first.at("mode").get<std::string>(),
                      rows / seconds, bytes / seconds / 1e9, seconds});
  }
  return points;
}

int run_launcher(const Args& a) {
  // --curve on: shards and workers (which inherit the environment) use the job's keys.
  if (a.curve && std::getenv(net::kJobTokenVariable) == nullptr) {
    setenv(net::kJobTokenVariable, net::generate_job_token().c_str(), 1);
  }
  if (!a.curve) unsetenv(net::kJobTokenVariable);
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("aiacc-bench-ps-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string exe = self_exe();

  std::cout << "aiacc-bench ps: " << a.servers << " shard processes, " << a.workers
            << " worker processes, optimiser " << a.optimizer << ", "
            << std::thread::hardware_concurrency() << " cores\n";
  // Shards and workers share the cores: OpenMP threads beyond a fair share only spin.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = a.server_threads > 0 ? a.server_threads : std::max(1, cores / (a.servers + a.workers));
  auto context = net::Context::create(1, net::curve_keys_from_environment());

  // --repeat R: R sweeps, each with fresh shards, iperf3 before the first, between sweeps and
  // after the last. A sweep's ceiling is the higher of the two runs around it, so a drift of
  // this machine's speed during the minutes a long benchmark takes hits a sweep and its
  // ceiling alike (one ceiling for all sweeps would pair early sweeps with late ceilings).
  std::vector<double> iperf_runs{measure_iperf(a.iperf_seconds, a.iperf_streams)};
  std::vector<std::vector<PointResult>> sweeps;
  Shards shards;
  for (int r = 0; r < a.repeat; ++r) {
    shards = start_shards(a, exe, dir, threads);
    sweeps.push_back(run_sweep(a, exe, dir, shards, context));
    // The last sweep's shards stay up for the memory measurement.
    if (r + 1 < a.repeat) stop_shards(shards, context);
    iperf_runs.push_back(measure_iperf(a.iperf_seconds, a.iperf_streams));
  }
  std::vector<double> ceilings;  // per sweep; <= 0: iperf3 unavailable
  for (int r = 0; r < a.repeat; ++r) ceilings.push_back(std::max(iperf_runs[static_cast<std::size_t>(r)], iperf_runs[static_cast<std::size_t>(r) + 1]));
  const bool have_ceiling = std::all_of(ceilings.begin(), ceilings.end(), [](double c) { return c > 0; });
  if (have_ceiling) {
    std::cout << fmt::format("loopback TCP ceiling (iperf3, {} stream(s)): {:.2f} GB/s in runs before, between "
                             "and after the {} sweep(s); each sweep's ceiling is the higher of the two around it\n",
                             a.iperf_streams, fmt::join(iperf_runs, ", "), a.repeat);
  } else if (a.iperf_seconds == 0) {
    std::cout << "loopback TCP ceiling: not measured (--iperf-seconds 0)\n";
  } else {
    std::cout << fmt::format("loopback TCP ceiling: iperf3 failed in some of its runs ({:.2f} GB/s; negative: "
                             "failed), so no ratios\n", fmt::join(iperf_runs, ", "));
  }

  nlohmann::json points = nlohmann::json::array();
  std::cout << fmt::format("shards run {} OpenMP thread(s) each\n", threads);
  if (a.table_rows > 0) {
    std::cout << fmt::format("requests draw distinct ids from tables of {} rows\n", a.table_rows);
  }
  if (a.repeat > 1) std::cout << fmt::format("medians of {} sweeps, [min-max] of the ratio\n", a.repeat);
  std::cout << fmt::format("{:>5} {:>8} {:>5} {:>14} {:>12} {:>9} {:>11}\n", "dim", "ids/req", "mode",
                           "rows/s", "payload GB/s", "of iperf3", "range");
  for (std::size_t p = 0; p < sweeps[0].size(); ++p) {
    const PointResult& first = sweeps[0][p];
    std::vector<double> rows, gbs, ratios;
    nlohmann::json runs = nlohmann::json::array();
    for (std::size_t r = 0; r < sweeps.size(); ++r) {
      const PointResult& run = sweeps[r][p];
      rows.push_back(run.rows_per_s);
      gbs.push_back(run.gb_per_s);
      nlohmann::json entry{{"rows_per_s", run.rows_per_s}, {"payload_gb_per_s", run.gb_per_s},
                           {"seconds", run.seconds}};
      if (have_ceiling) {
        ratios.push_back(run.gb_per_s / ceilings[r]);
        entry["iperf3_gb_per_s"] = ceilings[r];
        entry["ratio_to_iperf3"] = ratios.back();
      }
      runs.push_back(entry);
    }
    const Spread row_spread = spread_of(rows);
    const Spread gb_spread = spread_of(gbs);
    nlohmann::json point{{"dim", first.dim}, {"ids_per_request", first.ids}, {"mode", first.mode},
                         {"rows_per_s", row_spread.median}, {"rows_per_s_min", row_spread.min},
                         {"rows_per_s_max", row_spread.max}, {"payload_gb_per_s", gb_spread.median},
                         {"sweeps", runs}};
    std::string share = "-", range = "-";
    if (have_ceiling) {
      const Spread ratio = spread_of(ratios);
      point["ratio_to_iperf3"] = ratio.median;
      point["ratio_to_iperf3_min"] = ratio.min;
      point["ratio_to_iperf3_max"] = ratio.max;
      share = fmt::format("{:.0f}%", 100.0 * ratio.median);
      range = fmt::format("[{:.0f}-{:.0f}%]", 100.0 * ratio.min, 100.0 * ratio.max);
    }
    std::cout << fmt::format("{:>5} {:>8} {:>5} {:>14.4g} {:>12.3f} {:>9} {:>11}\n", first.dim, first.ids,
                             first.mode, row_spread.median, gb_spread.median, share, range);
    points.push_back(point);
  }

  nlohmann::json memory;
  if (a.memory_rows > 0) {
    ps::ClientOptions options;
    options.endpoints = shards.endpoints;
    options.timeout_s = 600;
    ps::PsClient client(options, context);
    const ps::TableConfig config = table_for(a.memory_dim, a.optimizer, "bench_memory", 1);
    client.create_table(config);
    std::vector<std::int64_t> rss_before;
    for (const auto& s : shards.processes) rss_before.push_back(rss_bytes(s->pid()));
    constexpr std::int64_t kChunk = kFillChunk;
    std::vector<std::int64_t> ids(kChunk);
    std::vector<float> rows(static_cast<std::size_t>(kChunk * a.memory_dim));
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t base = 0; base < a.memory_rows; base += kChunk) {
      const std::int64_t n = std::min(kChunk, a.memory_rows - base);
      for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(mix64(static_cast<std::uint64_t>(base + i) ^ 0xabcdefull));
      client.wait(client.pull("bench_memory", std::span(ids).first(static_cast<std::size_t>(n)), rows.data(), 0));
    }
    const double fill_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::int64_t rss_growth = 0;
    for (std::size_t k = 0; k < shards.processes.size(); ++k) {
      rss_growth += rss_bytes(shards.processes[k]->pid()) - rss_before[k];
    }
    std::int64_t held = 0;
    std::size_t store_bytes = 0;
    for (const auto& shard : client.stats()) {
      for (const auto& t : shard) {
        if (t.name == "bench_memory") {
          held += t.rows;
          store_bytes += t.memory_bytes;
        }
      }
    }
    const int state = optim::SparseRowOptimizer(config.optimizer).state_floats(a.memory_dim);
    const double raw = 4.0 * (a.memory_dim + state);
    memory = {{"rows", held}, {"dim", a.memory_dim}, {"state_floats", state},
              {"raw_bytes_per_row", raw},
              {"store_bytes_per_row", double(store_bytes) / double(held)},
              {"store_ratio", double(store_bytes) / double(held) / raw},
              {"rss_bytes_per_row", double(rss_growth) / double(held)},
              {"rss_ratio", double(rss_growth) / double(held) / raw},
              {"fill_seconds", fill_seconds}};
    std::cout << fmt::format("memory at {} rows (dim {}, {} state floats, raw {:.0f} B/row): store "
                             "{:.1f} B/row ({:.2f}x), shard RSS growth {:.1f} B/row ({:.2f}x); "
                             "filled in {:.1f} s\n", held, a.memory_dim, state, raw,
                             memory["store_bytes_per_row"].get<double>(), memory["store_ratio"].get<double>(),
                             memory["rss_bytes_per_row"].get<double>(), memory["rss_ratio"].get<double>(),
                             fill_seconds);
  }

  stop_shards(shards, context);
  if (!a.json.empty()) {
    nlohmann::json out{{"benchmark", "ps"}, {"servers", a.servers}, {"workers", a.workers},
                       {"chunk_bytes", a.chunk_bytes}, {"inflight", a.inflight}, {"server_threads", threads},
                       {"table_rows", a.table_rows}, {"server_partitions", a.server_partitions},
                       {"unique_ids", a.unique_ids},
                       {"optimizer", a.optimizer}, {"cores", std::thread::hardware_concurrency()},
                       {"repeat", a.repeat}, {"iperf3_runs_gb_per_s", iperf_runs},
                       {"iperf3_streams", a.iperf_streams},
                       {"points", points}, {"memory", memory}};
    write_output(a.json, out.dump(1) + "\n");
    std::cout << "wrote " << a.json << "\n";
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

int run_ps_bench(int argc, char** argv) {
  try {
    if (argc >= 4 && std::string(argv[2]) == "--role" && std::string(argv[3]) == "server") {
      // A shard process: its options follow "--role server"; the server program's code runs it.
      std::vector<char*> server_argv{argv[0]};
      for (int i = 4; i < argc; ++i) server_argv.push_back(argv[i]);
      return ps::run_server_process(static_cast<int>(server_argv.size()), server_argv.data());
    }
    const Args args = parse(argc, argv);
    if (args.help) {
      std::cout << kUsage;
      return 0;
    }
    if (args.role == "worker") return run_worker(args);
    return run_launcher(args);
  } catch (const ConfigError& e) {
    std::cerr << "aiacc-bench ps: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "aiacc-bench ps: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace aiacc::bench
