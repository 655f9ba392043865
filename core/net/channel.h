// Channel: a reliable, ordered, message-based connection to one peer rank over one TCP
// connection. The unit ring/ and ps/ build on: send bytes, receive a Message, each bounded by a
// deadline and labelled with what it is doing so a failure names the peer and the operation.
//
// Socket type: ZMQ_PAIR. A channel has exactly one peer, so DEALER/ROUTER's routing (identity
// frames, fair-queueing over many peers, ROUTER silently dropping on HWM) buys nothing and
// costs a frame per message. PAIR is exclusive (a second connection to a bound PAIR is refused),
// ordered and lossless, and blocks at the high-water mark instead of dropping.
//
// Copy vs zero-copy: both, by size (ChannelOptions::zero_copy_min_bytes, default 128 KiB).
// A copied send costs a malloc + memcpy but returns once the message is queued; a zero-copy
// send hands ZeroMQ the caller's buffer and waits for its release callback (the bytes are in
// the kernel). Measured with tools/bench/net_bench.cc on loopback (2 cores): the hand-off
// dominates small messages (1 KiB: copy 10x faster), the memcpy large ones (256 KiB and up:
// zero-copy 1.5-2x faster, because the copy competes with ZeroMQ's I/O threads for CPU).
#pragma once

#include <cstddef>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/net/channel_options.h"
#include "core/net/deadline.h"
#include "core/net/link.h"
#include "core/net/message.h"
#include "core/net/socket.h"

namespace aiacc::net {

class Channel final : public Link {
 public:
  // A ZMQ_PAIR socket configured from `options` (HWMs, kernel buffers, no message size limit,
  // linger), ready to bind or connect. Used by Mesh; exposed for tests.
  static Socket make_socket(std::shared_ptr<Context> context, const ChannelOptions& options);

  // Takes a bound-and-accepted or connected socket whose peer is `peer` (handshake done).
  Channel(Socket socket, int peer, int stream, const ChannelOptions& options);
  Channel(Channel&&) noexcept;
  Channel& operator=(Channel&&) noexcept;
  // Drops (abandon_posted) posted buffers the transport still holds.
  ~Channel() override;

  // Sends `bytes` as one message. Blocks until the caller may reuse `bytes`: for a copied
  // message, until it is queued (may wait while send_hwm messages are queued); for a zero-copy
  // one (size >= zero_copy_min_bytes), until ZeroMQ has finished reading the buffer.
  // Throws TimeoutError at `deadline` (a PeerTimeoutError, naming the peer, `what` and the time
  // waited) and CommError on a transport failure or a disconnected peer. A send to a peer that
  // has just died may still succeed (the message is queued); the failure then surfaces at the
  // next recv or blocking send. After a zero-copy timeout the channel is closed (the only way to
  // make ZeroMQ release the caller's buffer) and later calls throw CommError.
  // Not thread-safe: one thread per channel at a time.
  void send(std::span<const std::byte> bytes, Deadline deadline, std::string_view what) override;

  // Sends `parts` as one multipart message, delivered atomically (all parts or none) and read
  // with recv_parts(). Same blocking and buffer contract as send() for every part.
  void send_parts(std::span<const std::span<const std::byte>> parts, Deadline deadline,
                  std::string_view what);

  // Queues `bytes` as one message and returns without waiting for the transport to read them
  // (messages of at least zero_copy_min_bytes are not copied): the caller keeps `bytes` alive
  // and unmodified until wait_posted() returns. Blocks only while send_hwm messages are
  // queued, until `deadline` (TimeoutError). Lets one thread keep several chunks in flight,
  // which is how the ring pipelines sends with its reductions.
  void post(std::span<const std::byte> bytes, Deadline deadline, std::string_view what) override;
  // Blocks until the transport has read every buffer given to post(), or `deadline`: then
  // the channel is closed (ZeroMQ drops the buffers) and TimeoutError is thrown.
  void wait_posted(Deadline deadline, std::string_view what) override;
  // For error paths: if posted buffers are still held, closes the channel and waits until
  // ZeroMQ has dropped them, so the caller may free them. Never throws.
  void abandon_posted() noexcept override;

  // Receives the next message; it must be single-frame (else CommError naming the count).
  // Blocks until it arrives or `deadline` (TimeoutError). Zero copies after the kernel's.
  // If the peer's connection drops (its process died or it closed the channel), messages it
  // sent before are still delivered, then recv throws CommError "... disconnected" at once
  // instead of waiting for the deadline.
  Message recv(Deadline deadline, std::string_view what) override;
  // Receives the next message with all of its frames.
  std::vector<Message> recv_parts(Deadline deadline, std::string_view what);

  int peer() const override { return peer_; }
  int stream() const override { return stream_; }
  const std::string& endpoint() const { return socket_.endpoint(); }
  bool is_open() const { return socket_.is_open(); }
  // Closes the connection now (messages already sent still go out within linger_ms); the
  // peer's next recv that finds nothing queued throws CommError "disconnected".
  void close() {
    socket_.close();
    monitor_.close();
  }

 private:
  class ZeroCopyTracker;
  // Sends one frame (takes ownership of `msg`'s content on success).
  void send_frame(zmq_msg_t* msg, bool more, Deadline deadline, std::string_view what,
                  Clock::time_point start);
  void recv_frame(Message& message, Deadline deadline, std::string_view what,
                  Clock::time_point start);
  // Waits until `event` is possible on the socket; TimeoutError at `deadline`.
  void wait_for(short event, Deadline deadline, std::string_view what, Clock::time_point start);
  void require_open(std::string_view what) const;
  // Closes the socket discarding queued messages (after a failure that broke the stream).
  void abandon() noexcept;
  [[noreturn]] void fail(const char* call, std::string_view what) const;
  // Reads pending connection events; sets peer_gone_ when the peer's connection ends.
  void drain_monitor();
  std::string describe(short event) const;  // "send to rank 2 (stream 0; connected to tcp://...)"

  // Receives socket_'s connection events (inproc PAIR), so a dead peer is reported at once
  // rather than at the deadline. Declared before socket_, so socket_ (whose close stops the
  // monitor) goes first.
  Socket monitor_;
  Socket socket_;
  // Buffers given to post() that ZeroMQ still holds (heap-allocated: its address is the
  // release callback's hint and must survive moves of the Channel).
  std::unique_ptr<ZeroCopyTracker> posted_;
  bool peer_gone_ = false;
  // Connections accepted on socket_ after the channel was set up: never the peer's (it was
  // connected before), so their disconnects are not the peer's either (intruders, scanners).
  std::set<std::uint32_t> foreign_connections_;
  // Handshake failures whose disconnect has not come yet. libzmq reports a connection that
  // ends before its handshake completes with a failure and then its disconnect, back to back;
  // the peer's connection completed its handshake before the channel existed. So a disconnect
  // that follows a failure belongs to an intruder, also one accepted while the mesh was being
  // set up (before this channel's monitor, so not among foreign_connections_).
  int refused_disconnects_due_ = 0;
  int peer_;
  int stream_;
  std::int64_t zero_copy_min_bytes_;
};

}  // namespace aiacc::net
