// Fuzz target: every request a parameter-server shard accepts (ps/protocol.h), sent to a real
// PsServer over ZeroMQ (inproc): header decoding, create_table configs, pull/push frame checks,
// load_rows/dump_rows, stats, and save/load of shard checkpoints.
//
// Input: up to 16 messages, each [u8 frame count (1..6)] then per frame [u16 length][bytes].
// Frame 0 is normally the 72-byte RequestHeader. The harness keeps the shard alive and its
// files in the scratch directory: shutdown requests are dropped, and the path frame of save
// and load is replaced by a scratch file (so a save can be loaded back by a later message).
// After the messages it sends a stats request and waits for its answer: the shard must keep
// answering. Findings besides crashes: the request thread stops, no answer within 20 s, or an
// error reply that reveals a failed internal check or a C++ library exception (the shard
// forwards any std::exception's text to the worker; recognised by how such texts begin).
//
// Table sizes come from the job's config, which the shard trusts: create_table requests whose
// table would take more than a few MB per row or per worker (dim > 256, num_workers > 64) are
// skipped here, so the fuzzer's memory limit flags parsers, not configured sizes.
#include <zmq.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/net/context.h"
#include "core/net/message.h"
#include "core/net/socket.h"
#include "ps/protocol.h"
#include "ps/server.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace aiacc;

// Inputs served by one shard before it is replaced (bounds the rows and tables it accumulates).
constexpr int kInputsPerServer = 1000;

class Harness {
 public:
  Harness() : context_(net::Context::create(1)) { restart(); }

  // Sends the messages of one input, then a stats probe; returns when the probe is answered.
  void run(const std::vector<std::vector<std::string>>& messages) {
    if (++inputs_ > kInputsPerServer) restart();
    for (const auto& frames : messages) {
      for (std::size_t i = 0; i < frames.size(); ++i) {
        const bool more = i + 1 < frames.size();
        if (zmq_send(dealer_.handle(), frames[i].data(), frames[i].size(), more ? ZMQ_SNDMORE : 0) < 0) {
          throw fuzz::PropertyViolation("fuzz harness: zmq_send failed");
        }
      }
    }
    ps::RequestHeader probe;
    probe.op = ps::Op::stats;
    probe.worker = 0xfffffff0u;
    probe.session = 0x5eed;
    probe.seq = ++probe_seq_;
    const auto probe_bytes = ps::header_bytes(probe);
    zmq_send(dealer_.handle(), probe_bytes.data(), probe_bytes.size(), 0);
    wait_for_probe(probe.seq);
  }

 private:
  void restart() {
    server_.reset();
    dealer_ = net::Socket();
    ps::ServerOptions options;
    // A fresh name each time: ZeroMQ releases an inproc name only once the old socket is reaped.
    options.bind = "inproc://aiacc-fuzz-ps-" + std::to_string(++servers_);
    options.num_partitions = 2;
    options.num_threads = 1;
    options.wait_timeout_s = 0.2;  // held bounded-staleness pulls expire quickly
    options.log_interval_s = 0;
    server_ = std::make_unique<ps::PsServer>(options, context_);
    dealer_ = net::Socket(context_, ZMQ_DEALER, 0);
    dealer_.connect(server_->endpoint());
    inputs_ = 0;
  }

  void check_server() {
    try {
      server_->check();
    } catch (const std::exception& e) {
      throw fuzz::PropertyViolation(std::string("the shard's request loop stopped: ") + e.what());
    }
  }

  void wait_for_probe(std::uint64_t seq) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::vector<net::Message> parts;
    while (std::chrono::steady_clock::now() < deadline) {
      check_server();
      if (!(dealer_.poll(ZMQ_POLLIN, 50) & ZMQ_POLLIN)) continue;
      parts.clear();
      for (;;) {
        net::Message part;
        if (zmq_msg_recv(part.raw(), dealer_.handle(), 0) < 0) throw fuzz::PropertyViolation("zmq_msg_recv failed");
        const bool more = zmq_msg_more(part.raw()) != 0;
        parts.push_back(std::move(part));
        if (!more) break;
      }
      ps::ReplyHeader header;
      try {
        header = ps::decode_reply_header(parts[0].bytes(), "fuzzed shard");
      } catch (const CommError& e) {
        throw fuzz::PropertyViolation(std::string("the shard sent a malformed reply: ") + e.what());
      }
      if (header.status == ps::Status::error && parts.size() > 1) check_error_text(ps::as_text(parts[1].bytes()));
      if (header.op == ps::Op::stats && header.seq == seq) return;
    }
    check_server();
    throw fuzz::PropertyViolation("the shard did not answer within 20 s");
  }

  static void check_error_text(std::string_view text) {
    static const bool verbose = std::getenv("AIACC_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "error reply: %.*s\n", static_cast<int>(text.size()), text.data());
    // Prefixes only: our typed errors start with context the shard chooses (the request, the
    // table), whereas their tails may echo any input, these markers included.
    for (std::string_view marker : {"internal check failed at ", "std::", "vector::", "basic_string",
                                    "map::at", "stoi", "stol", "stod", "bad_array_new_length",
                                    "cannot create std::", "[json.exception.", "yaml-cpp: "}) {
      if (text.starts_with(marker)) {
        throw fuzz::PropertyViolation("the shard answered with an unexpected error: " + std::string(text));
      }
    }
  }

  std::shared_ptr<net::Context> context_;
  std::unique_ptr<ps::PsServer> server_;
  net::Socket dealer_;
  int inputs_ = 0;
  int servers_ = 0;
  std::uint64_t probe_seq_ = 0;
};

// Whether a create_table config frame asks for a table this harness does not serve (see top).
bool oversized_table(std::string_view yaml) {
  try {
    const ps::TableConfig config = ps::decode_table_config(yaml, "fuzz");
    return config.spec.dim > 256 || config.options.num_workers > 64;
  } catch (const Error&) {
    return false;  // the shard will refuse it too
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  static Harness harness;
  const std::string checkpoint = fuzz::scratch_path("ps-shard.safetensors").string();

  fuzz::InputCursor input(data, size);
  std::vector<std::vector<std::string>> messages;
  while (!input.empty() && messages.size() < 16) {
    const int count = 1 + input.u8() % 6;
    std::vector<std::string> frames;
    for (int i = 0; i < count; ++i) frames.emplace_back(input.bytes(input.u16()));
    if (frames[0].size() == sizeof(ps::RequestHeader)) {
      std::uint16_t op = 0;
      std::memcpy(&op, frames[0].data() + offsetof(ps::RequestHeader, op), sizeof op);
      if (op == static_cast<std::uint16_t>(ps::Op::shutdown)) continue;
      if ((op == static_cast<std::uint16_t>(ps::Op::save) || op == static_cast<std::uint16_t>(ps::Op::load)) &&
          frames.size() >= 2) {
        frames[1] = checkpoint;
      }
      if (op == static_cast<std::uint16_t>(ps::Op::create_table) && frames.size() >= 2 &&
          oversized_table(frames[1])) {
        continue;
      }
    }
    messages.push_back(std::move(frames));
  }
  harness.run(messages);
  return 0;
}
