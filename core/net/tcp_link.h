// TcpLink: a Link over one plain TCP connection that the calling thread reads and writes
// itself, with no I/O thread in between. A ZeroMQ message crosses two thread hand-offs per
// side (caller -> I/O thread -> kernel and back); on a 2-core VM that made an 8-byte exchange
// between two ranks take 50-60 us where the syscalls alone take 5-20 us.
//
// Framing: an 8-byte little-endian length, then the bytes. A received message is one
// allocation (Message), read straight from the socket.
//
// Progress without a thread: post() writes what the kernel takes and queues the rest; the
// queue advances whenever any wait on the same thread runs (recv, send, wait_posted of any
// TcpLink), so a rank that posts to its right neighbour and then blocks receiving from its left
// keeps feeding the right one. Hence the rule (Channel does not have it): a link with posted
// messages belongs to the thread that posted them until wait_posted() or abandon_posted().
// Unlike ZeroMQ, nothing reads ahead for the application: a sender blocks once the kernel's
// buffers are full until the receiver calls recv (collectives always do).
//
// Waiting: every wait first polls without sleeping for `spin_us` microseconds (a blocked
// poll's wake-up costs 10-20 us here), then sleeps in poll(2) until the deadline.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/io/atomic_file.h"
#include "core/net/link.h"

namespace aiacc::net {

class TcpLink final : public Link {
 public:
  // Takes a connected, non-blocking TCP socket to `peer` (handshake done). `spin_us` is read at
  // every wait and may change (the owner decides; nullptr: never spin); it must outlive the link.
  TcpLink(io::FileDescriptor socket, int peer, int stream, std::string endpoint,
          const std::atomic<int>* spin_us);
  // Not movable: this thread's list of links with queued sends points at it.
  TcpLink(const TcpLink&) = delete;
  TcpLink& operator=(const TcpLink&) = delete;
  // Drops (abandon_posted) what is still queued.
  ~TcpLink() override;

  // Throws TimeoutError (a PeerTimeoutError naming the peer) at `deadline` and CommError when
  // the peer has gone (connection reset or closed) or the link was closed; both name the peer
  // rank, the stream (stream_name()) and `what`. A send or wait that fails drops what was
  // queued (abandon_posted) before it throws, and any failure in the middle of a message
  // closes the link.
  void send(std::span<const std::byte> bytes, Deadline deadline, std::string_view what) override;
  // Never blocks and has no queue limit (unlike Channel's high-water mark): what the kernel
  // does not take now is queued (the caller's buffer, not a copy); `deadline` is unused.
  void post(std::span<const std::byte> bytes, Deadline deadline, std::string_view what) override;
  void wait_posted(Deadline deadline, std::string_view what) override;
  // Drops queued messages and, if there were any, closes the link: the peer cannot tell where
  // a cut message ends (its recv then fails with "disconnected").
  void abandon_posted() noexcept override;
  // Messages the peer sent before closing are delivered; then CommError "disconnected".
  Message recv(Deadline deadline, std::string_view what) override;
  // Reads the message straight into `out` (no allocation, no copy). A size that differs
  // closes the link (its bytes stay unread) before the CommError.
  void recv_into(std::span<std::byte> out, Deadline deadline, std::string_view what) override;

  int peer() const override { return peer_; }
  int stream() const override { return stream_; }
  const std::string& endpoint() const { return endpoint_; }
  bool is_open() const { return socket_.valid(); }
  // Closes the connection now (queued messages are dropped).
  void close() noexcept;

 private:
  struct Outgoing {
    std::uint64_t header;  // the length, little-endian
    const std::byte* data;
    std::size_t size;
    std::size_t written;  // of header and data together
  };

  // Writes queued messages until the kernel refuses more; true once the queue is empty.
  bool flush(std::string_view what);
  // Reads the next message's length, then lets read_body(length, start, consumed) read its
  // bytes; a failure after the first byte of the message closes the link.
  template <class ReadBody>
  auto receive(Deadline deadline, std::string_view what, ReadBody&& read_body);
  // Reads exactly `size` bytes into `out`, adding each byte read to `consumed`.
  void read_exact(std::byte* out, std::size_t size, Deadline deadline, std::string_view what,
                  Clock::time_point start, std::size_t& consumed);
  // Waits until `event` (POLLIN/POLLOUT) is possible on this socket, moving this thread's other
  // queued sends meanwhile. TimeoutError at `deadline`.
  void wait_for(short event, Deadline deadline, std::string_view what, Clock::time_point start);
  void require_open(std::string_view what) const;
  void enlist() noexcept;   // into this thread's links with queued sends
  void delist() noexcept;
  // Closes the link and throws CommError for a failed call.
  [[noreturn]] void fail(const char* call, int error, std::string_view what);
  std::string describe(short event) const;  // "recv from rank 2 (stream 0; tcp 127.0.0.1:41234)"

  io::FileDescriptor socket_;
  int peer_;
  int stream_;
  std::string endpoint_;
  const std::atomic<int>* spin_us_;
  std::deque<Outgoing> queue_;
  // The posting thread's list of links with queued sends while this one is on it, else null.
  std::vector<TcpLink*>* sending_list_ = nullptr;
};

}  // namespace aiacc::net
