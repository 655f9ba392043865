// Link: the message interface the collectives in ring/ are written against. Two transports
// implement it: Channel (a ZeroMQ PAIR socket; its I/O thread moves the bytes) and TcpLink (a
// plain TCP socket the calling thread reads and writes itself, for latency). Both deliver
// whole messages, in order, with a deadline on every wait and errors naming the peer rank and
// the operation; their contracts for send/post/recv are Channel's (channel.h), except where
// tcp_link.h says otherwise.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "core/net/deadline.h"
#include "core/net/message.h"

namespace aiacc::net {

class Link {
 public:
  virtual ~Link() = default;

  // Sends `bytes` as one message; returns when the caller may reuse them.
  virtual void send(std::span<const std::byte> bytes, Deadline deadline, std::string_view what) = 0;
  // Queues `bytes` as one message; the caller keeps them alive and unchanged until
  // wait_posted() returns.
  virtual void post(std::span<const std::byte> bytes, Deadline deadline, std::string_view what) = 0;
  // Returns once the transport no longer reads any buffer given to post().
  virtual void wait_posted(Deadline deadline, std::string_view what) = 0;
  // For error paths: afterwards the transport no longer touches posted buffers (queued
  // messages are dropped and the link is closed if it still held some). Never throws.
  virtual void abandon_posted() noexcept = 0;
  // The next message.
  virtual Message recv(Deadline deadline, std::string_view what) = 0;
  // The next message, which must be exactly `out.size()` bytes, written into `out` (CommError
  // naming both sizes otherwise: the ranks disagree on a buffer). TcpLink reads it from the
  // socket straight into `out`; the default receives a Message and copies it.
  virtual void recv_into(std::span<std::byte> out, Deadline deadline, std::string_view what);

  virtual int peer() const = 0;
  // The stream index in the mesh's numbering (ring/communicator.h: 2s or 2s + 1 for data
  // stream s, by direction).
  virtual int stream() const = 0;

  // How error messages name this link's stream: "stream N" (the mesh's numbering) unless its
  // owner has said what the stream is to the user (ring/communicator.cc: "dense ring stream 0,
  // from rank 1 to this rank": the configured stream and the direction, not the mesh's index).
  std::string stream_name() const;
  void set_stream_label(std::string label) { stream_label_ = std::move(label); }

  // The CommError for a received message of `got` bytes where `expected` were due, naming the
  // peer, the stream and `what`.
  [[noreturn]] void throw_size_mismatch(std::size_t got, std::size_t expected, std::string_view what) const;

 protected:
  Link() = default;
  Link(const Link&) = default;
  Link& operator=(const Link&) = default;
  Link(Link&&) = default;
  Link& operator=(Link&&) = default;

 private:
  std::string stream_label_;  // empty: "stream N"
};

}  // namespace aiacc::net
