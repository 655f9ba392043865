// run_server_process: argument parsing, signal handling and the serve-until-stopped loop.
#include "ps/server_process.h"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
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
    "usage: aiacc-ps-server [--shard K] [--num-shards N] [--bind tcp://ADDRESS:PORT] [--endpoint-file FILE]\n"
    "                       [--load CHECKPOINT_FOLDER | SHARD_FILE] [--partitions P] [--threads T]\n"
    "                       [--log-interval-s S] [--wait-timeout-s S]\n"
    "Serves shard K of N parameter-server shards until SIGTERM, SIGINT or a client's shutdown.\n"
    "AIACC_JOB_TOKEN (the job's token) secures its connections with CURVE; without it, it serves\n"
    "unauthenticated. --load reads this shard's file of a checkpoint folder (ps-shard-0000K-of-0000N).\n"
    "--wait-timeout-s: how long a bounded table's pull may be held, and (x 0.8) a sync step may wait\n"
    "for its slowest worker; give the clients' timeout (default 120).\n";

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
    // A checkpoint folder: this shard's own file in it.
    std::error_code error;
    if (!load.empty() && std::filesystem::is_directory(load, error)) {
      load = (std::filesystem::path(load) / shard_checkpoint_name(options.shard, options.num_shards)).string();
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
    PsServer server(options, net::Context::create(1, std::move(curve)));
    if (!load.empty()) server.load_checkpoint(load);
    if (!endpoint_file.empty()) io::write_file_atomically(endpoint_file, server.endpoint() + "\n");
    for (;;) {
      if (server.wait_stopped(net::deadline_after(0.2))) break;
      timespec zero{0, 0};
      const int signal = sigtimedwait(&signals, nullptr, &zero);
      if (signal == SIGTERM || signal == SIGINT) {
        log::get("ps")->info("shard {}: stopping on signal {}", options.shard, signal);
        break;
      }
    }
    server.stop();
    server.check();
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
