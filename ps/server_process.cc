// run_server_process: argument parsing, signal handling and the serve-until-stopped loop.
#include "ps/server_process.h"

#include <csignal>
#include <cstdio>
#include <ctime>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/log.h"
#include "core/net/context.h"
#include "core/net/security.h"
#include "ps/server.h"

namespace aiacc::ps {
namespace {

int parse_int(const std::string& key, const std::string& value) {
  try {
    std::size_t used = 0;
    const int parsed = std::stoi(value, &used);
    if (used == value.size()) return parsed;
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("aiacc-ps-server: {} expects an integer, got '{}'", key, value));
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
      if (i + 1 >= argc) throw ConfigError(fmt::format("aiacc-ps-server: {} needs a value", key));
      const std::string value = argv[++i];
      if (key == "--shard") options.shard = parse_int(key, value);
      else if (key == "--num-shards") options.num_shards = parse_int(key, value);
      else if (key == "--bind") options.bind = value;
      else if (key == "--endpoint-file") endpoint_file = value;
      else if (key == "--load") load = value;
      else if (key == "--partitions") options.num_partitions = parse_int(key, value);
      else if (key == "--threads") options.num_threads = parse_int(key, value);
      else if (key == "--log-interval-s") options.log_interval_s = std::stod(value);
      else throw ConfigError(fmt::format("aiacc-ps-server: unknown option '{}' (known: --shard, "
                                         "--num-shards, --bind, --endpoint-file, --load, "
                                         "--partitions, --threads, --log-interval-s)", key));
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
