// ClientIo: the PsClient's sending, receiving, retrying and timing-out thread.
#include "ps/detail/client_io.h"

#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"
#include "core/error.h"
#include "core/kernels/row_copy.h"
#include "core/log.h"
#include "core/net/security.h"
#include "ps/detail/frames.h"

namespace aiacc::ps::detail {

void TicketState::finish_one(std::exception_ptr request_error) {
  std::vector<std::shared_ptr<void>> released;  // freed after the lock is let go
  std::lock_guard lock(mutex);
  if (request_error && !error) error = request_error;
  if (--remaining > 0) return;
  if (!error && !inverse.empty()) {
    // Expand the unique rows to every position of the request (duplicates included).
    for (std::size_t p = 0; p < inverse.size(); ++p) {
      std::memcpy(out + p * dim, unique_rows.data() + static_cast<std::size_t>(inverse[p]) * dim,
                  dim * sizeof(float));
    }
  }
  done = true;
  released.swap(keep_alive);
  cv.notify_all();
}

ClientIo::ClientIo(const ClientOptions& options, std::shared_ptr<net::Context> context)
    : options_(options), endpoints_(options.endpoints) {
  const std::size_t shards = endpoints_.size();
  for (std::size_t k = 0; k < shards; ++k) {
    net::Socket socket(context, ZMQ_DEALER, 1000);
    socket.set_int(ZMQ_SNDHWM, 0, "ZMQ_SNDHWM");
    socket.set_int(ZMQ_RCVHWM, 0, "ZMQ_RCVHWM");
    socket.set_int64(ZMQ_MAXMSGSIZE, -1, "ZMQ_MAXMSGSIZE");
    socket.connect(endpoints_[k]);
    // After connect: this replaces the context's handshake watcher, and reports to it.
    net::Socket monitor = socket.open_monitor(net::ConnectionEvents::events());
    sockets_.push_back(std::move(socket));
    monitors_.push_back(std::move(monitor));
  }
  links_.resize(shards);
  seq_.assign(shards, 0);
  in_flight_.resize(shards);
  thread_ = std::thread([this] { run(); });
}

ClientIo::~ClientIo() {
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
  }
  try {
    wake_.notify();
  } catch (const std::exception& e) {
    log::get("ps")->warn("ps client: could not wake the I/O thread: {}", e.what());
  }
  if (thread_.joinable()) thread_.join();
}

std::uint64_t ClientIo::next_seq(int shard) {
  std::lock_guard lock(queue_mutex_);
  return ++seq_[static_cast<std::size_t>(shard)];
}

void ClientIo::submit(std::vector<OutRequest> requests) {
  {
    std::lock_guard lock(queue_mutex_);
    if (stopping_) throw CommError("ps client is closed");
    for (auto& r : requests) queue_.push_back(std::move(r));
  }
  wake_.notify();
}

std::string ClientIo::describe(int shard, const OutRequest& r) const {
  return fmt::format("ps shard {} ({}): {} [worker {}, step {}, seq {}]", shard,
                     endpoints_[static_cast<std::size_t>(shard)], r.ticket->what, r.header.worker,
                     r.header.step, r.header.seq);
}

void ClientIo::send(const OutRequest& r) {
  void* socket = sockets_[static_cast<std::size_t>(r.shard)].handle();
  const std::string what = fmt::format("sending {}", r.ticket->what);
  detail::send_frame(socket, header_bytes(r.header), nullptr, !r.frames.empty(), -1, what);
  for (std::size_t i = 0; i < r.frames.size(); ++i) {
    detail::send_frame(socket, r.frames[i], r.owners[i], i + 1 < r.frames.size(),
                       options_.zero_copy_min_bytes, what);
  }
}

void ClientIo::read_monitor(int shard) {
  Link& link = links_[static_cast<std::size_t>(shard)];
  const std::string& endpoint = endpoints_[static_cast<std::size_t>(shard)];
  while (const auto event = net::try_recv_monitor_event(monitors_[static_cast<std::size_t>(shard)].handle())) {
    switch (link.events.interpret(*event)) {
      case net::ConnectionEvents::Meaning::refused:
        link.why = fmt::format("the shard refused our handshake ({}): it belongs to another job, "
                               "or this process lacks the job's token",
                               net::describe_handshake_failure(event->event, event->value));
        sockets_[static_cast<std::size_t>(shard)].context()->report_failed_handshake(
            endpoint, false, event->event, event->value);
        if (!link.down_since) link.down_since = net::Clock::now();
        break;
      case net::ConnectionEvents::Meaning::down:
        if (!link.down_since) {
          link.down_since = net::Clock::now();
          link.why = "its process died or closed the connection, or the network to it is cut";
          if (shard_exits_expected_) {
            log::get("ps")->debug("ps shard {} ({}): connection closed at the end of the job", shard, endpoint);
          } else {
            log::get("ps")->warn("ps shard {} ({}): connection lost; waiting up to {:.1f} s for it to come back",
                                 shard, endpoint, options_.reconnect_grace_s);
          }
        }
        break;
      case net::ConnectionEvents::Meaning::up:
        if (link.down_since) {
          log::get("ps")->info("ps shard {} ({}): connection back after {:.2f} s", shard, endpoint,
                               net::seconds_since(*link.down_since));
        }
        link.down_since.reset();
        link.why.clear();
        break;
      default:
        break;
    }
  }
}

std::string ClientIo::gone_reason(int shard, net::Clock::time_point now) const {
  const Link& link = links_[static_cast<std::size_t>(shard)];
  if (!link.broken.empty()) return link.broken;
  if (!link.down_since) return "";
  const double down = std::chrono::duration<double>(now - *link.down_since).count();
  if (down < options_.reconnect_grace_s) return "";
  return fmt::format("the connection to the shard was lost {:.1f} s ago and has not come back "
                     "({})",
                     down, link.why);
}

void ClientIo::run() {
  const std::size_t shards = sockets_.size();
  std::vector<zmq_pollitem_t> items(2 * shards + 1);
  items[0] = {nullptr, wake_.fd(), ZMQ_POLLIN, 0};
  for (std::size_t k = 0; k < shards; ++k) items[k + 1] = {sockets_[k].handle(), 0, ZMQ_POLLIN, 0};
  for (std::size_t k = 0; k < shards; ++k) {
    items[shards + k + 1] = {monitors_[k].handle(), 0, ZMQ_POLLIN, 0};
  }
  std::vector<net::Message> parts;
  auto last_timer_check = net::Clock::now();
  for (;;) {
    const int polled = zmq_poll(items.data(), static_cast<int>(items.size()), 100);
    if (polled < 0 && zmq_errno() != EINTR) {
      fail_all(fmt::format("zmq_poll failed: {}", zmq_strerror(zmq_errno())));
      return;
    }
    // Reset the wake-up before taking the queue, so a submit() in between wakes us again.
    wake_.clear();
    std::vector<OutRequest> batch;
    {
      std::lock_guard lock(queue_mutex_);
      if (stopping_) break;
      batch.swap(queue_);
    }
    for (std::size_t k = 0; k < shards; ++k) read_monitor(static_cast<int>(k));
    const auto now = net::Clock::now();
    for (OutRequest& r : batch) {
      if (const std::string gone = gone_reason(r.shard, now); !gone.empty()) {
        r.ticket->finish_one(std::make_exception_ptr(CommError(describe(r.shard, r) + ": " + gone)));
        continue;
      }
      int attempts = 1;
      try {
        send(r);
        if (r.send_twice) send(r);
      } catch (const std::exception& e) {
        // Not connected (the shard is down or restarting, or refuses us): kept and sent again
        // one retry interval later, until its deadline, as a resend is. It used to fail at
        // once, so whether a request to an unreachable shard failed now or at its deadline
        // depended on whether its connection had been dropped yet.
        attempts = 0;
        log::get("ps")->warn("sending {} failed: {}; trying again in {:.1f} s", describe(r.shard, r), e.what(),
                             options_.retry_interval_s);
      }
      const std::uint64_t seq = r.header.seq;
      const int shard = r.shard;
      in_flight_[static_cast<std::size_t>(shard)].emplace(
          seq, InFlight{std::move(r), now, now + net::duration_from_seconds(options_.timeout_s), attempts});
    }
    for (std::size_t k = 0; k < shards; ++k) {
      for (int i = 0; i < 1024; ++i) {
        try {
          if (!detail::try_recv_parts(sockets_[k].handle(), parts, endpoints_[k])) break;
        } catch (const std::exception& e) {
          log::get("ps")->warn("ps client: receive from shard {} failed: {}", k, e.what());
          break;
        }
        on_reply(static_cast<int>(k), parts);
      }
    }
    if (net::seconds_since(last_timer_check) >= 0.05) {
      check_timers();
      last_timer_check = net::Clock::now();
    }
  }
  fail_all("the ps client was closed");
}

void ClientIo::on_reply(int shard, std::vector<net::Message>& parts) {
  auto& flights = in_flight_[static_cast<std::size_t>(shard)];
  ReplyHeader header;
  Link& link = links_[static_cast<std::size_t>(shard)];
  try {
    header = decode_reply_header(parts.at(0).bytes(), endpoints_[static_cast<std::size_t>(shard)]);
  } catch (const std::exception& e) {
    // Its request cannot be told from the reply: fail every request to the shard now (a shard
    // of another version answers every request so) rather than at timeout_s.
    log::get("ps")->error("ps client: a reply from shard {} cannot be read: {}", shard, e.what());
    if (link.broken.empty()) link.broken = fmt::format("a reply from the shard could not be read: {}", e.what());
    return;
  }
  // A shard that came back within the grace at the same endpoint is a new process: what it held
  // is gone (or back at a checkpoint), and training on would lose updates without a word.
  if (link.incarnation == 0) link.incarnation = header.incarnation;
  if (header.incarnation != link.incarnation && link.broken.empty()) {
    link.broken = fmt::format(
        "the shard was restarted during the job (this reply comes from a new process, incarnation {:016x}, "
        "not {:016x}), so the rows it held are lost or back at its last checkpoint; restart the whole job "
        "from its checkpoint (cluster.max_restarts, or the launcher's restart)",
        header.incarnation, link.incarnation);
    log::get("ps")->error("ps shard {} ({}): {}", shard, endpoints_[static_cast<std::size_t>(shard)],
                          link.broken);
  }
  auto it = flights.find(header.seq);
  if (it == flights.end()) return;  // the answer to a retry or a duplicate: already handled
  OutRequest request = std::move(it->second.request);
  flights.erase(it);
  TicketState& t = *request.ticket;
  std::exception_ptr error;
  try {
    if (!link.broken.empty()) throw CommError(describe(shard, request) + ": " + link.broken);
    if (header.status == Status::error) {
      const std::string message = parts.size() > 1 ? std::string(as_text(parts[1].bytes())) : "";
      throw CommError(fmt::format("{} failed on the shard: {}", describe(shard, request), message));
    }
    if (header.op != request.header.op) {
      // Branching on the reply's op for another request's state would write past it.
      throw CommError(fmt::format("{}: the reply is for a {}, not this {}", describe(shard, request),
                                  op_name(header.op), op_name(request.header.op)));
    }
    if (header.op == Op::pull) {
      const auto positions = request.positions;
      const std::size_t row_bytes = t.dim * sizeof(float);
      if (parts.size() != 2 || header.count != positions.size() ||
          parts[1].size() != positions.size() * row_bytes) {
        throw CommError(fmt::format("{}: malformed pull reply ({} frames, {} rows, {} bytes; "
                                    "expected {} rows of {} bytes)", describe(shard, request),
                                    parts.size(), header.count, parts.size() > 1 ? parts[1].size() : 0,
                                    positions.size(), row_bytes));
      }
      const std::byte* src = parts[1].bytes().data();
      for (std::size_t j = 0; j < positions.size(); ++j) {
        kernels::copy_row(t.dest + static_cast<std::size_t>(positions[j]) * t.dim, src + j * row_bytes, t.dim);
      }
    } else if (header.op != Op::push) {
      auto& out = t.replies[static_cast<std::size_t>(shard)];
      out.clear();
      for (std::size_t i = 1; i < parts.size(); ++i) out.push_back(std::move(parts[i]));
    }
  } catch (...) {
    error = std::current_exception();
  }
  t.finish_one(error);
}

void ClientIo::check_timers() {
  const auto now = net::Clock::now();
  for (std::size_t k = 0; k < in_flight_.size(); ++k) {
    auto& flights = in_flight_[k];
    const std::string gone = gone_reason(static_cast<int>(k), now);
    for (auto it = flights.begin(); it != flights.end();) {
      InFlight& f = it->second;
      if (!gone.empty()) {
        f.request.ticket->finish_one(
            std::make_exception_ptr(CommError(describe(static_cast<int>(k), f.request) + ": " + gone)));
        it = flights.erase(it);
        continue;
      }
      if (now >= f.deadline) {
        f.request.ticket->finish_one(std::make_exception_ptr(TimeoutError(fmt::format(
            "{}: no answer after {:.1f} s and {} attempts (is the shard running? a sync or "
            "bounded table also waits for the slowest worker)",
            describe(static_cast<int>(k), f.request), options_.timeout_s, f.attempts))));
        it = flights.erase(it);
        continue;
      }
      if (net::seconds_since(f.sent) >= options_.retry_interval_s) {
        try {
          send(f.request);
          ++f.attempts;
          f.sent = now;
          log::get("ps")->debug("resent {}", describe(static_cast<int>(k), f.request));
        } catch (const std::exception& e) {
          // Not connected (the shard is down, or refuses us): try again one interval later,
          // not at every turn of this loop.
          f.sent = now;
          log::get("ps")->warn("resending {} failed: {}", describe(static_cast<int>(k), f.request),
                               e.what());
        }
      }
      ++it;
    }
  }
}

void ClientIo::fail_all(const std::string& why) {
  std::vector<OutRequest> queued;
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
    queued.swap(queue_);
  }
  for (OutRequest& r : queued) {
    r.ticket->finish_one(std::make_exception_ptr(CommError(describe(r.shard, r) + ": " + why)));
  }
  for (std::size_t k = 0; k < in_flight_.size(); ++k) {
    for (auto& [seq, f] : in_flight_[k]) {
      f.request.ticket->finish_one(std::make_exception_ptr(
          CommError(describe(static_cast<int>(k), f.request) + ": " + why)));
    }
    in_flight_[k].clear();
  }
}

}  // namespace aiacc::ps::detail
