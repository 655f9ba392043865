// RendezvousState: the rendezvous store's request handling (moved out of
// rendezvous_server.cc unchanged, so that it can be driven without sockets).
#include "core/net/detail/rendezvous_state.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/net/detail/rendezvous_protocol.h"

namespace aiacc::net::detail {

namespace {

WireWriter& ok(WireWriter& reply) {
  return reply.u32(static_cast<std::uint32_t>(RendezvousStatus::kOk));
}

}  // namespace

std::string RendezvousState::answer(const std::string& identity, std::span<const std::byte> request) {
  WireWriter reply;
  try {
    WireReader reader(request, "rendezvous request");
    const std::uint64_t sequence = reader.u64();
    reply.u64(sequence);
    handle(identity, reader, reply);
  } catch (const CommError& e) {
    // A malformed request hurts only its sender: answer with the error, keep serving.
    reply = WireWriter();
    reply.u64(0).u32(static_cast<std::uint32_t>(RendezvousStatus::kError)).str(e.what());
  }
  const auto bytes = reply.bytes();
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void RendezvousState::handle(const std::string& identity, WireReader& request,
                             WireWriter& reply) {
  const auto op = static_cast<RendezvousOp>(request.u32());
  const auto now = std::chrono::steady_clock::now();
  const int sender = rank_of(identity);
  if (op == RendezvousOp::kAbort) {
    const int rank = request.i32();
    const std::uint32_t kind = request.u32();
    const std::string message = request.str();
    request.finish();
    // The first failure is the job's (a later one is likely its consequence); a job already
    // broken at registration keeps that error, which every rank has been getting anyway.
    if (!abort_seen_ && fatal_.empty()) {
      fatal_ = fmt::format("rendezvous: rank {} failed: {}", rank, message);
      abort_reason_ = message;
      aborted_by_ = rank;
      abort_kind_ = kind == static_cast<std::uint32_t>(AbortKind::kConfig) ? kind : 0;
      log::get("net")->error("{}", fatal_);
      for (const auto& [r, at] : last_request_) {
        if (r != rank && now - at <= kWaitingWindow) waiting_at_abort_.insert(r);
      }
    }
    abort_seen_ = true;
    told_.insert(rank);
    ok(reply);
    return;
  }
  if (sender >= 0) last_request_[sender] = now;
  if (aborted_by_ >= 0) {
    if (sender >= 0) told_.insert(sender);
    reply.u32(static_cast<std::uint32_t>(RendezvousStatus::kAborted)).u32(abort_kind_).str(fatal_);
    return;
  }
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

bool RendezvousState::abort_delivered() const {
  if (!abort_seen_) return false;
  for (int rank : waiting_at_abort_) {
    if (!told_.count(rank)) return false;
  }
  return true;
}

int RendezvousState::rank_of(const std::string& identity) const {
  for (const auto& [rank, entry] : ranks_) {
    if (entry.identity == identity) return rank;
  }
  return -1;
}

void RendezvousState::register_rank(const std::string& identity, int rank, int world,
                                    std::vector<std::string> addresses) {
  if (world < 1 || rank < 0 || rank >= world) {
    fatal_ = fmt::format("rendezvous: rank {} is out of range for world size {} (ranks are "
                         "0..{})", rank, world, std::int64_t{world} - 1);  // world may be INT_MIN
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

}  // namespace aiacc::net::detail
