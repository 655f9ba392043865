// RendezvousServer: the request loop and the job state it guards.
#include "core/net/rendezvous_server.h"

#include <zmq.h>

#include <cerrno>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/net/detail/rendezvous_protocol.h"
#include "core/net/detail/wire.h"
#include "core/net/message.h"

namespace aiacc::net {

using detail::RendezvousOp;
using detail::RendezvousStatus;
using detail::WireReader;
using detail::WireWriter;

// The job as the server sees it. Touched only by the server thread.
class RendezvousServer::State {
 public:
  // Handles one request from the connection `identity`; fills `reply` after its status.
  void handle(const std::string& identity, WireReader& request, WireWriter& reply) {
    const auto op = static_cast<RendezvousOp>(request.u32());
    if (!fatal_.empty()) {
      reply.u32(static_cast<std::uint32_t>(RendezvousStatus::kError)).str(fatal_);
      return;
    }
    switch (op) {
      case RendezvousOp::kRegister: {
        const int rank = request.i32();
        const int world = request.i32();
        auto addresses = request.strings();
        request.finish();
        register_rank(identity, rank, world, std::move(addresses));
        break;
      }
      case RendezvousOp::kTable:
        request.finish();
        ok(reply).i32(world_size_).u64(ranks_.size());
        for (const auto& [rank, entry] : ranks_) reply.i32(rank).strings(entry.addresses);
        return;
      case RendezvousOp::kSet: {
        std::string key = request.str();
        std::string value = request.str();
        request.finish();
        kv_[std::move(key)] = std::move(value);
        break;
      }
      case RendezvousOp::kGet: {
        const std::string key = request.str();
        request.finish();
        auto it = kv_.find(key);
        if (it == kv_.end()) {
          reply.u32(static_cast<std::uint32_t>(RendezvousStatus::kNotYet));
        } else {
          ok(reply).str(it->second);
        }
        return;
      }
      case RendezvousOp::kBarrier: {
        std::string name = request.str();
        const int rank = request.i32();
        request.finish();
        auto& arrived = barriers_[std::move(name)];
        arrived.insert(rank);
        ok(reply).u64(arrived.size());
        for (int r : arrived) reply.i32(r);
        return;
      }
      default:
        throw CommError(fmt::format("rendezvous: unknown request op {}",
                                    static_cast<std::uint32_t>(op)));
    }
    if (!fatal_.empty()) {
      reply.u32(static_cast<std::uint32_t>(RendezvousStatus::kError)).str(fatal_);
    } else {
      ok(reply);
    }
  }

 private:
  struct Entry {
    std::string identity;  // the connection that registered it (tells retries from duplicates)
    std::vector<std::string> addresses;
  };

  static WireWriter& ok(WireWriter& reply) {
    return reply.u32(static_cast<std::uint32_t>(RendezvousStatus::kOk));
  }

  void register_rank(const std::string& identity, int rank, int world,
                     std::vector<std::string> addresses) {
    if (world < 1 || rank < 0 || rank >= world) {
      fatal_ = fmt::format("rendezvous: rank {} is out of range for world size {} (ranks are "
                           "0..{})", rank, world, world - 1);
    } else if (world_size_ != -1 && world != world_size_) {
      fatal_ = fmt::format("rendezvous: world size disagreement: rank {} says {}, but rank {} "
                           "said {}", rank, world, first_rank_, world_size_);
    } else if (auto it = ranks_.find(rank); it != ranks_.end() && it->second.identity != identity) {
      fatal_ = fmt::format("rendezvous: duplicate rank {}: registered by two processes (the "
                           "second with addresses [{}]); check the launcher's rank assignment",
                           rank, fmt::join(addresses, ", "));
    }
    if (!fatal_.empty()) {
      log::get("net")->error("{}", fatal_);
      return;
    }
    if (world_size_ == -1) {
      world_size_ = world;
      first_rank_ = rank;
    }
    ranks_[rank] = {identity, std::move(addresses)};
  }

  int world_size_ = -1;
  int first_rank_ = -1;
  std::map<int, Entry> ranks_;
  std::map<std::string, std::string> kv_;
  std::map<std::string, std::set<int>> barriers_;
  std::string fatal_;  // non-empty once the job is broken
};

RendezvousServer::RendezvousServer(std::shared_ptr<Context> context, const std::string& host,
                                   int port)
    : socket_(std::move(context), ZMQ_ROUTER, /*linger_ms=*/0),
      state_(std::make_unique<State>()) {
  // Replies are tiny and a vanished client must not block the loop.
  socket_.set_int(ZMQ_ROUTER_MANDATORY, 0, "ZMQ_ROUTER_MANDATORY");
  endpoint_ = socket_.bind(fmt::format("tcp://{}:{}", host, port));
  port_ = std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1));
  thread_ = std::thread([this] { serve(); });
}

RendezvousServer::~RendezvousServer() {
  stop_ = true;
  thread_.join();
  if (failed_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      log::get("net")->error("rendezvous server on {} stopped: {}", endpoint_, e.what());
    }
  }
}

void RendezvousServer::check() const {
  if (failed_) std::rethrow_exception(error_);
}

void RendezvousServer::serve() {
  try {
    while (!stop_) {
      // Short slices so the destructor's stop request is seen promptly.
      if (!(socket_.poll(ZMQ_POLLIN, 50) & ZMQ_POLLIN)) continue;
      Message identity;
      Message payload;
      if (zmq_msg_recv(identity.raw(), socket_.handle(), ZMQ_DONTWAIT) < 0) {
        if (zmq_errno() == EAGAIN || zmq_errno() == EINTR) continue;
        socket_.fail("zmq_msg_recv(rendezvous identity)");
      }
      if (zmq_msg_recv(payload.raw(), socket_.handle(), ZMQ_DONTWAIT) < 0) {
        socket_.fail("zmq_msg_recv(rendezvous request)");
      }
      while (zmq_msg_more(payload.raw())) {  // ignore extra frames of a foreign client
        Message extra;
        if (zmq_msg_recv(extra.raw(), socket_.handle(), ZMQ_DONTWAIT) < 0) break;
        payload = std::move(extra);
      }
      const std::string id(reinterpret_cast<const char*>(identity.bytes().data()),
                           identity.size());
      WireWriter reply;
      try {
        WireReader request(payload.bytes(), "rendezvous request");
        const std::uint64_t sequence = request.u64();
        reply.u64(sequence);
        state_->handle(id, request, reply);
      } catch (const CommError& e) {
        // A malformed request hurts only its sender: answer with the error, keep serving.
        reply = WireWriter();
        reply.u64(0).u32(static_cast<std::uint32_t>(RendezvousStatus::kError)).str(e.what());
      }
      const auto bytes = reply.bytes();
      // ROUTER drops (does not block on) a reply to a client that has gone: fine.
      zmq_send(socket_.handle(), id.data(), id.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
      zmq_send(socket_.handle(), bytes.data(), bytes.size(), ZMQ_DONTWAIT);
    }
  } catch (...) {
    error_ = std::current_exception();
    failed_ = true;
  }
  socket_.close();
}

}  // namespace aiacc::net
