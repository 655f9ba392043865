// aiacc-bench-net: core/net channel throughput and latency between 2 ranks (threads of this
// process, each with its own ZeroMQ context, as separate processes would have) over loopback TCP.
// For each message size, stream count K and send mode (copy / zero-copy), a message is split
// into K parts sent concurrently, one thread per stream:
//   one-way: rank 0 sends `iters` messages, rank 1 receives them and acks; GB/s = bytes / time
//   ping-pong: rank 0 sends, rank 1 echoes the received buffer; µs = round trip / 2
// Each figure is the median of --reps repetitions (min and max printed too). The flags are in
// kUsage below (aiacc-bench-net --help).
#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/net/mesh_bootstrap.h"
#include "core/net/message_memory.h"
#include "core/net/rendezvous_client.h"
#include "core/net/rendezvous_server.h"
#include "core/util/flag_values.h"
#include "tools/bench/bench_cli.h"
#include "tools/bench/spread.h"

namespace {

using namespace aiacc::net;

constexpr std::string_view kUsage = R"(usage: aiacc-bench-net [options]
core/net channel throughput (one-way GB/s) and latency (ping-pong us) between 2 ranks over
loopback TCP, for every size x stream count x send mode.
  --sizes N,N,...     message sizes in bytes, 1 to 1073741824 (default: 4, 16, 64, ... up to --max-size)
  --max-size BYTES    largest default size, 4 to 1073741824 (default 268435456); ignored with --sizes
  --streams K,K,...   streams a message is split over, each 1 to 64 (default 1,4)
  --modes M,M,...     send modes: copy, zerocopy, default (ChannelOptions' threshold) (default all three)
  --reps N            repetitions per figure, 1 to 1000; median [min, max] printed (default 3)
  --json FILE         also write one JSON object per row to FILE (checked first, written at the end)
  -h, --help          this text
)";

constexpr std::int64_t kMaxSize = std::int64_t{1} << 30;
constexpr std::int64_t kMaxStreams = 64;

struct Args {
  bool help = false;
  std::vector<std::size_t> sizes;
  std::vector<int> streams = {1, 4};
  std::vector<std::string> modes = {"copy", "zerocopy", "default"};
  int reps = 3;
  std::string json;
};

using aiacc::bench::Spread;
using aiacc::bench::spread_of;
using aiacc::util::integer_flag;

Args parse(int argc, char** argv) {
  using aiacc::ConfigError;
  using aiacc::bench::list_flag;
  Args args;
  std::int64_t max_size = std::int64_t{256} << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (aiacc::bench::is_help_flag(flag)) {
      args.help = true;
      return args;
    }
    if (flag != "--sizes" && flag != "--streams" && flag != "--modes" && flag != "--reps" && flag != "--max-size" &&
        flag != "--json") {
      throw ConfigError(fmt::format("unknown option '{}' (see aiacc-bench-net --help)", flag));
    }
    if (i + 1 >= argc) throw ConfigError(fmt::format("{} needs a value", flag));
    const std::string value = argv[++i];
    if (flag == "--sizes") {
      args.sizes.clear();
      for (const auto& s : list_flag(flag, value, "4,1024,1048576")) {
        args.sizes.push_back(static_cast<std::size_t>(integer_flag(flag, s, 1, kMaxSize)));
      }
    } else if (flag == "--streams") {
      args.streams.clear();
      for (const auto& s : list_flag(flag, value, "1,4")) {
        args.streams.push_back(static_cast<int>(integer_flag(flag, s, 1, kMaxStreams)));
      }
    } else if (flag == "--modes") {
      args.modes = list_flag(flag, value, "copy,zerocopy");
      for (const auto& mode : args.modes) {
        if (mode != "copy" && mode != "zerocopy" && mode != "default") {
          throw ConfigError(fmt::format("--modes takes copy, zerocopy and default, got '{}'", mode));
        }
      }
    } else if (flag == "--reps") {
      args.reps = static_cast<int>(integer_flag(flag, value, 1, 1000));
    } else if (flag == "--max-size") {
      // Default sizes run 4, 16, 64, ...: below 4 there would be none.
      max_size = integer_flag(flag, value, 4, kMaxSize);
    } else {
      args.json = value;
      aiacc::bench::check_output_path(flag, args.json);  // refused now, not after the sweep
    }
  }
  if (args.sizes.empty()) {
    for (std::size_t size = 4; size <= static_cast<std::size_t>(max_size); size *= 4) args.sizes.push_back(size);
  }
  return args;
}

// Bytes of part `s` of a `size`-byte message split into `k` parts (first parts get the rest).
std::size_t part_size(std::size_t size, int k, int s) {
  return size / k + (static_cast<std::size_t>(s) < size % k ? 1 : 0);
}

int throughput_iters(std::size_t size) {
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{1} << 30) / std::max<std::size_t>(size, 1), 3, 20000));
}
int latency_iters(std::size_t size) {
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{128} << 20) / std::max<std::size_t>(size, 1), 3, 2000));
}

struct Row {
  std::size_t bytes;
  int streams;
  std::string mode;
  Spread gbps;
  Spread latency_us;
};

// Runs every size for one (K, mode) on a fresh pair of meshes.
std::vector<Row> run_config(const Args& args, int k, const std::string& mode) {
  ChannelOptions options;
  // "copy": always copy; "zerocopy": never copy; "default": ChannelOptions' size threshold.
  if (mode == "copy") options.zero_copy_min_bytes = -1;
  if (mode == "zerocopy") options.zero_copy_min_bytes = 0;
  RendezvousServer server(Context::create(), "127.0.0.1", 0);
  std::barrier sync(2 * k);
  std::vector<double> seconds(k);  // per stream of rank 0, one measurement
  std::vector<Row> rows;
  std::exception_ptr error;
  std::mutex error_mutex;
  const std::size_t largest = *std::max_element(args.sizes.begin(), args.sizes.end());

  auto rank_main = [&](int rank) {
    try {
      auto context = Context::create();
      RendezvousClient client(context, server.endpoint());
      const auto setup = deadline_after(30);
      client.register_rank(rank, 2, {}, setup);
      MeshSpec spec;
      spec.rank = rank;
      spec.world_size = 2;
      spec.streams = k;
      spec.channel = options;
      Mesh mesh = connect_mesh(context, client, spec, "bench", setup);
      std::vector<std::byte> buffer(part_size(largest, k, 0), std::byte{1});
      std::vector<std::thread> threads;
      for (int s = 0; s < k; ++s) {
        threads.emplace_back([&, s] {
          Channel& channel = mesh.channel(1 - rank, s);
          const std::byte ack{0};
          std::vector<double> samples;  // rank 0, stream 0: one per repetition
          for (std::size_t size : args.sizes) {
            const std::span<const std::byte> part(buffer.data(), part_size(size, k, s));
            for (int kind = 0; kind < 2; ++kind) {  // 0: one-way, 1: ping-pong
              const int iters = kind == 0 ? throughput_iters(size) : latency_iters(size);
              for (int rep = 0; rep < args.reps; ++rep) {
                sync.arrive_and_wait();
                const auto deadline = deadline_after(120);
                const auto start = Clock::now();
                if (rank == 0) {
                  for (int i = 0; i < iters; ++i) {
                    channel.send(part, deadline, "bench send");
                    if (kind == 1) channel.recv(deadline, "bench pong");
                  }
                  if (kind == 0) channel.recv(deadline, "bench ack");
                  seconds[s] = seconds_since(start);
                } else {
                  for (int i = 0; i < iters; ++i) {
                    Message message = channel.recv(deadline, "bench recv");
                    if (kind == 1) channel.send(message.bytes(), deadline, "bench ping");
                  }
                  if (kind == 0) channel.send({&ack, 1}, deadline, "bench ack");
                }
                sync.arrive_and_wait();
                if (rank == 0 && s == 0) {
                  const double t = *std::max_element(seconds.begin(), seconds.end());
                  if (rep == 0 && kind == 0) rows.push_back({size, k, mode, {}, {}});
                  auto& row = rows.back();
                  if (rep == 0) samples.clear();
                  samples.push_back(kind == 0 ? static_cast<double>(size) * iters / t / 1e9
                                              : t / iters / 2 * 1e6);
                  if (rep + 1 == args.reps) {
                    (kind == 0 ? row.gbps : row.latency_us) = spread_of(samples);
                  }
                }
              }
            }
          }
        });
      }
      for (auto& thread : threads) thread.join();
      client.barrier("bench-done", deadline_after(60));
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::thread peer(rank_main, 1);
  rank_main(0);
  peer.join();
  if (error) std::rethrow_exception(error);
  return rows;
}

std::string human(std::size_t bytes) {
  if (bytes >= (1u << 20)) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (1u << 10)) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

}  // namespace

int main(int argc, char** argv) {
  aiacc::net::keep_freed_message_memory();  // as every program of ours that moves large messages
  try {
    const Args args = parse(argc, argv);
    if (args.help) {
      fmt::print("{}", kUsage);
      return 0;
    }
    std::string json;
    fmt::print("core/net loopback, 2 ranks as threads, {} reps (median [min, max]), "
               "{} hardware threads\n",
               args.reps, std::thread::hardware_concurrency());
    fmt::print("{:>9} {:>2} {:>8} | {:>24} | {:>30}\n", "size", "K", "mode",
               "one-way GB/s", "ping-pong latency µs");
    for (const auto& mode : args.modes) {
      for (int k : args.streams) {
        for (const Row& row : run_config(args, k, mode)) {
          fmt::print("{:>9} {:>2} {:>8} | {:7.3f} [{:6.3f}, {:6.3f}] | {:9.1f} [{:8.1f}, {:8.1f}]\n",
                     human(row.bytes), row.streams, row.mode, row.gbps.median, row.gbps.min,
                     row.gbps.max, row.latency_us.median, row.latency_us.min,
                     row.latency_us.max);
          std::fflush(stdout);
          json += fmt::format(
              "{{\"bytes\": {}, \"streams\": {}, \"mode\": \"{}\", \"reps\": {}, "
              "\"gbps\": {{\"median\": {:.4f}, \"min\": {:.4f}, \"max\": {:.4f}}}, "
              "\"latency_us\": {{\"median\": {:.2f}, \"min\": {:.2f}, \"max\": {:.2f}}}}}\n",
              row.bytes, row.streams, row.mode, args.reps, row.gbps.median, row.gbps.min,
              row.gbps.max, row.latency_us.median, row.latency_us.min, row.latency_us.max);
        }
      }
    }
    if (!args.json.empty()) {
      aiacc::bench::write_output(args.json, json);
      fmt::print("wrote {}\n", args.json);
    }
    return 0;
  } catch (const aiacc::ConfigError& e) {
    std::fprintf(stderr, "aiacc-bench-net: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "aiacc-bench-net: %s\n", e.what());
    return 1;
  }
}
