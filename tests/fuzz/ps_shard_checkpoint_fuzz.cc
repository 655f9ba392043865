// Fuzz target: a parameter-server shard checkpoint (ps/shard_checkpoint.h, a safetensors file
// with table configs in its metadata) loaded into a running shard (PsServer::load_checkpoint:
// registers each table and replaces its rows).
//
// Input: the file's bytes. Tables with dim > 256 or num_workers > 64 are skipped, as in
// ps_request_fuzz.cc: table sizes are configuration, which the shard trusts.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ps/server.h"
#include "ps/shard_checkpoint.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace aiacc;

constexpr int kInputsPerServer = 500;  // bounds the tables one shard accumulates

ps::PsServer& shard() {
  static std::unique_ptr<ps::PsServer> server;
  static int inputs = 0;
  static int servers = 0;
  if (!server || ++inputs > kInputsPerServer) {
    server.reset();
    ps::ServerOptions options;
    // A fresh name each time: ZeroMQ releases an inproc name only once the old socket is reaped.
    options.bind = "inproc://aiacc-fuzz-ps-shard-" + std::to_string(++servers);
    options.num_partitions = 2;
    options.num_threads = 1;
    options.log_interval_s = 0;
    server = std::make_unique<ps::PsServer>(options);
    inputs = 0;
  }
  return *server;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  const auto path = fuzz::scratch_path("shard.safetensors");
  fuzz::write_file(path, std::string(reinterpret_cast<const char*>(data), size));
  ps::PsServer& server = shard();
  fuzz::expect_input_errors([&] {
    const ps::ShardCheckpoint checkpoint = ps::read_shard_checkpoint(path.string());
    for (const ps::TableConfig& table : checkpoint.tables) {
      if (table.spec.dim > 256 || table.options.num_workers > 64) return;
    }
    server.load_checkpoint(path.string());
  });
  return 0;
}
