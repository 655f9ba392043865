// run_server_process: argument parsing, signal handling and the serve-until-stopped loop.
#include "ps/server_process.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/log.h"
#include "core/net/context.h"
#include "core/net/security.h"
#include "core/util/flag_values.h"
#include "ps/server.h"
#include "ps/shard_checkpoint.h"

namespace aiacc::ps {
namespace {

constexpr const char* kUsage =
    "usage: aiacc-ps-server [--shard K] [--num-shards N] [--bind tcp://HOST:PORT | ipc://PATH] [--endpoint-file FILE]\n"
    "                       [--load CHECKPOINT_FOLDER | SHARD_FILE] [--partitions P] [--threads T]\n"
    "                       [--log-interval-s S] [--wait-timeout-s S]\n"
    "Serves shard K of N parameter-server shards until SIGTERM, SIGINT or a client's shutdown, to\n"
    "ps::PsClient users and aiacc-bench ps (aiacc-train runs its shards as its own ranks instead).\n"
    "AIACC_JOB_TOKEN (the job's token) secures its connections with CURVE; without it, it serves\n"
    "unauthenticated.\n"
    "--bind: tcp://HOST:PORT, PORT 0-65535 (0 or *: any free port; the default tcp://127.0.0.1:0), HOST\n"
    "  an address of this machine, an interface name or * (all); or ipc://PATH.\n"
    "--endpoint-file: written (atomically) with the bound endpoint once the shard serves.\n"
    "--load reads this shard's file of a checkpoint folder (ps-shard-0000K-of-0000N) before serving.\n"
    "--threads: OpenMP threads a request uses (default 0: OMP_NUM_THREADS, else one per CPU this process\n"
    "  can keep busy: its affinity, cut to its container's CPU limit).\n"
    "--wait-timeout-s: how long a bounded table's pull may be held, and (x 0.8) a sync step may wait\n"
    "for its slowest worker; give the clients' timeout (default 300, as ps::ClientOptions::timeout_s).\n";

constexpr const char* kBindForms =
    "expected tcp://HOST:PORT (PORT 0-65535, 0 or * for any free port; HOST an address of this machine, an "
    "interface name or *) or ipc://PATH";

// "" when `endpoint` has a form --bind takes, else what is wrong with it. ZeroMQ itself takes a
// port above 65535 modulo 65536, and reads a malformed address as an interface name.
std::string bind_problem(const std::string& endpoint) {
  if (endpoint.starts_with("ipc://")) return endpoint.size() > 6 ? "" : "ipc:// without a path";
  if (!endpoint.starts_with("tcp://")) return "not a tcp:// or ipc:// endpoint";
  const std::string rest = endpoint.substr(6);
  const std::size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return "no :PORT";
  const std::string host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  if (host.empty()) return "no HOST before :PORT";
  if (host.front() == '[' && host.back() != ']') return "an IPv6 HOST is written [ADDRESS]";
  if (host.find_first_not_of("0123456789.") == std::string::npos) {  // a dotted IPv4 address
    int parts = 0;
    for (std::size_t begin = 0; begin <= host.size(); ++parts) {
      const std::size_t end = std::min(host.find('.', begin), host.size());
      const std::string part = host.substr(begin, end - begin);
      if (part.empty() || part.size() > 3 || std::stoi(part) > 255) {
        return fmt::format("HOST {} is not an IPv4 address (four numbers 0-255)", host);
      }
      begin = end + 1;
    }
    if (parts != 4) return fmt::format("HOST {} is not an IPv4 address (four numbers 0-255)", host);
  }
  if (port == "*") return "";
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos) {
    return fmt::format("PORT '{}' is not a number", port);
  }
  if (port.size() > 5 || std::stoi(port) > 65535) return fmt::format("PORT {} is above 65535", port);
  return "";
}

// Throws ConfigError unless `file` can be created: its folder exists and takes new files.
void check_endpoint_file(const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_directory(file, error)) throw ConfigError(fmt::format("--endpoint-file {} is a folder", file));
  const fs::path parent = fs::path(file).parent_path().empty() ? fs::path(".") : fs::path(file).parent_path();
  if (!fs::is_directory(parent, error)) {
    throw ConfigError(fmt::format("--endpoint-file {}: its folder {} does not exist{}", file, parent.string(),
                                  error && error != std::errc::no_such_file_or_directory
                                      ? fmt::format(" or cannot be read ({})", error.message()) : std::string()));
  }
  // A file created and removed there: access() passes root everywhere, even in /proc.
  std::string probe = (parent / ".aiacc-ps-server-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    throw ConfigError(fmt::format("--endpoint-file {}: cannot create files in its folder {}: {}", file,
                                  parent.string(), std::strerror(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

int parse_int(const std::string& key, const std::string& value, int min, int max) {
  return static_cast<int>(util::integer_flag(key, value, min, max));
}

double parse_seconds(const std::string& key, const std::string& value) {
  const double parsed = util::number_flag(key, value);
  if (parsed < 0) throw ConfigError(fmt::format("{} expects seconds (a number >= 0), got '{}'", key, value));
  return parsed;
}

}  // namespace

int run_server_process(int argc, char** argv) {
  try {
    ServerOptions options;
    std::string endpoint_file;
    std::string load;
    for (int i = 1; i < argc; ++i) {
      const std::string key = argv[i];
      if (key == "ps-server" || key == "--serve") continue;  // sub-command words of a host program
      if (key == "--help" || key == "-h") {
        std::fputs(kUsage, stdout);
        return 0;
      }
      constexpr int kMax = 1 << 20;
      const bool known = key == "--shard" || key == "--num-shards" || key == "--bind" || key == "--endpoint-file" ||
                         key == "--load" || key == "--partitions" || key == "--threads" || key == "--log-interval-s" ||
                         key == "--wait-timeout-s";
      if (!known) throw ConfigError(fmt::format("unknown option '{}'\n{}", key, kUsage));
      if (i + 1 >= argc) throw ConfigError(fmt::format("{} needs a value", key));
      const std::string value = argv[++i];
      if (key == "--shard") options.shard = parse_int(key, value, 0, kMax);
      else if (key == "--num-shards") options.num_shards = parse_int(key, value, 1, kMax);
      else if (key == "--bind") options.bind = value;
      else if (key == "--endpoint-file") endpoint_file = value;
      else if (key == "--load") load = value;
      else if (key == "--partitions") options.num_partitions = parse_int(key, value, 1, 4096);
      else if (key == "--threads") options.num_threads = parse_int(key, value, 0, 4096);
      else if (key == "--wait-timeout-s") options.wait_timeout_s = parse_seconds(key, value);
      else options.log_interval_s = parse_seconds(key, value);
    }
    if (options.wait_timeout_s <= 0) throw ConfigError("--wait-timeout-s must be above 0");
    if (options.shard >= options.num_shards) {
      throw ConfigError(fmt::format("--shard {} is not below --num-shards {} (shards count from 0)", options.shard,
                                    options.num_shards));
    }
    if (const std::string problem = bind_problem(options.bind); !problem.empty()) {
      throw ConfigError(fmt::format("--bind {}: {}; {}", options.bind, problem, kBindForms));
    }
    // Everything the shard needs is checked, and the checkpoint read, before it binds and
    // announces that it serves: a launcher waiting for "serving" (or the endpoint file) never
    // sees a shard that then fails on its inputs.
    if (!endpoint_file.empty()) check_endpoint_file(endpoint_file);
    std::optional<ShardCheckpoint> checkpoint;
    if (!load.empty()) {
      try {
        load = find_shard_checkpoint(load, options.shard, options.num_shards);
      } catch (const ConfigError& e) {
        throw ConfigError(fmt::format("--load {}", e.what()));
      }
      try {
        checkpoint = read_shard_checkpoint(load);
      } catch (const DataError& e) {
        // Not a shard checkpoint at all (another file, a torn one): the flag's value is wrong.
        throw ConfigError(fmt::format("--load {}", e.what()));
      }
      // A file named directly may be another shard's: the shard would refuse it only once it
      // started, as a runtime failure that did not name --load.
      if (checkpoint->shard != options.shard || checkpoint->num_shards != options.num_shards) {
        throw ConfigError(fmt::format(
            "--load {}: the file of shard {} of {}; this server is shard {} of {} (--shard {} --num-shards {}): "
            "give it {} or the checkpoint folder",
            load, checkpoint->shard, checkpoint->num_shards, options.shard, options.num_shards, options.shard,
            options.num_shards, shard_checkpoint_name(options.shard, options.num_shards)));
      }
    }
    log::set_role(fmt::format("ps shard {}", options.shard));
    // Block the stop signals before any thread starts, then poll for them below.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    // Secured like the rest of the job when started with its token (AIACC_JOB_TOKEN).
    auto curve = net::curve_keys_from_environment();
    if (!curve) {
      log::get("ps")->warn("shard {}: {} is not set: serving without authentication or encryption",
                           options.shard, net::kJobTokenVariable);
    }
    std::unique_ptr<PsServer> server;
    try {
      server = std::make_unique<PsServer>(options, net::Context::create(1, std::move(curve)),
                                          checkpoint ? &*checkpoint : nullptr);
    } catch (const CommError& e) {
      throw CommError(fmt::format("--bind {}: cannot listen there: {} (HOST must be an address of this machine, "
                                  "an interface name or *; a port in use: choose another, or 0 for any free one)",
                                  options.bind, e.what()));
    }
    checkpoint.reset();  // its rows are in the tables now
    if (!endpoint_file.empty()) io::write_file_atomically(endpoint_file, server->endpoint() + "\n");
    for (;;) {
      if (server->wait_stopped(net::deadline_after(0.2))) break;
      timespec zero{0, 0};
      const int signal = sigtimedwait(&signals, nullptr, &zero);
      if (signal == SIGTERM || signal == SIGINT) {
        log::get("ps")->info("shard {}: stopping on signal {}", options.shard, signal);
        break;
      }
    }
    server->stop();
    server->check();
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "aiacc-ps-server: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "aiacc-ps-server: %s\n", e.what());
    return 1;
  }
}

}  // namespace aiacc::ps
