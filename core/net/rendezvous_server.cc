// RendezvousServer: the request loop and the job state it guards.
#include "core/net/rendezvous_server.h"

#include <zmq.h>

#include <cerrno>
#include <chrono>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/net/detail/rendezvous_state.h"
#include "core/net/message.h"

namespace aiacc::net {

RendezvousServer::RendezvousServer(std::shared_ptr<Context> context, const std::string& host,
                                   int port)
    : socket_(std::move(context), ZMQ_ROUTER, /*linger_ms=*/0),
      state_(std::make_unique<detail::RendezvousState>()) {
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

bool RendezvousServer::wait_abort_delivered(Deadline deadline) const {
  while (!abort_delivered_) {
    if (Clock::now() >= deadline || failed_) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::string RendezvousServer::abort_message() const {
  std::lock_guard lock(abort_mutex_);
  return abort_message_;
}

RendezvousServer::Abort RendezvousServer::first_abort() const {
  std::lock_guard lock(abort_mutex_);
  return first_abort_;
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
      const std::string bytes = state_->answer(id, payload.bytes());
      abort_delivered_ = state_->abort_delivered();
      if (!state_->abort_message().empty()) {
        std::lock_guard lock(abort_mutex_);
        if (abort_message_.empty()) {
          abort_message_ = state_->abort_message();
          first_abort_ = {state_->aborted_by(), state_->abort_reason()};
        }
      }
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
