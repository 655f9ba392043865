// Options for channels and meshes (config section `cluster.net` or set by tests). Defaults are
// chosen for large gradient buckets on loopback or a LAN; the knobs exist so tests can reach
// rare paths cheaply (tiny kernel buffers, low high-water marks, short timeouts).
#pragma once

#include <cstdint>

#include "core/config/schema.h"

namespace aiacc::net {

struct ChannelOptions {
  // Time budget for establishing a mesh (every peer connected and handshaken); core/net takes
  // explicit deadlines, so callers pass deadline_after(connect_timeout_s) to Mesh or
  // connect_mesh. Generous because peers start at different times (launch, data loading).
  double connect_timeout_s = 120.0;
  // Kernel socket buffers (SO_SNDBUF / SO_RCVBUF) in bytes; 0 keeps the OS default, which
  // lets Linux auto-tune them (setting a value disables auto-tuning). Tests use ~4 KiB to
  // force many partial writes.
  std::int64_t send_buffer_bytes = 0;
  std::int64_t recv_buffer_bytes = 0;
  // ZeroMQ high-water marks in messages (not bytes): how many messages may queue per
  // direction before send() blocks. 1000 (ZeroMQ's default) never binds for the ring, which
  // has a few messages in flight; tests use 1-2 to exercise blocking sends.
  int send_hwm = 1000;
  int recv_hwm = 1000;
  // How long the context keeps unsent messages after a socket closes. Not 0: send() returns
  // once a message is queued (or, zero-copy, handed to the kernel or ZeroMQ's batch buffer),
  // so LINGER 0 could drop the last message of a run. Bounded, so a close never hangs.
  int linger_ms = 2000;
  // Messages of at least this many bytes are sent zero-copy (zmq_msg_init_data; send() waits
  // until ZeroMQ has written the buffer), smaller ones are copied; -1 disables zero-copy.
  // Measured with tools/bench/net_bench.cc (K=1, loopback, this 2-core machine): copying wins
  // below ~64 KiB (1 KiB: 0.41 vs 0.03 GB/s; waiting for ZeroMQ's release costs a thread
  // hand-off per message), zero-copy from ~256 KiB (256 KiB: 4.1 vs 2.3 GB/s; 4 MiB: 2.8 vs
  // 1.5 GB/s), as the memcpy competes with ZeroMQ's I/O threads for the two cores.
  std::int64_t zero_copy_min_bytes = 128 * 1024;

  template <class V>
  void visit(V& v) {
    v.field("connect_timeout_s", connect_timeout_s,
            "seconds to connect and handshake with every peer", config::greater_than(0.0));
    v.field("send_buffer_bytes", send_buffer_bytes,
            "kernel send buffer per connection (0: OS default, auto-tuned)",
            config::at_least<std::int64_t>(0));
    v.field("recv_buffer_bytes", recv_buffer_bytes,
            "kernel receive buffer per connection (0: OS default, auto-tuned)",
            config::at_least<std::int64_t>(0));
    v.field("send_hwm", send_hwm, "messages queued per connection before send blocks",
            config::at_least(1));
    v.field("recv_hwm", recv_hwm, "messages buffered per connection before the peer blocks",
            config::at_least(1));
    v.field("linger_ms", linger_ms, "ms unsent messages are kept after close",
            config::at_least(0));
    v.field("zero_copy_min_bytes", zero_copy_min_bytes,
            "send messages this large without copying (-1: always copy)",
            config::at_least<std::int64_t>(-1));
  }
};

}  // namespace aiacc::net
