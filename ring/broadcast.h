// Broadcast: copies the root's buffer to every rank along a pipelined chain root -> root+1 ->
// ... (chunked, each rank forwards a chunk as soon as it has it): bandwidth-optimal for the
// large tensors the trainer broadcasts at start (initial parameters), n - 1 hops of latency.
#pragma once

#include <memory>

#include "ring/buffer.h"
#include "ring/communicator.h"

namespace aiacc::ring {

class Broadcast {
 public:
  // `buffer` stays valid for the object's lifetime; same count and dtype on every rank.
  Broadcast(std::shared_ptr<Communicator> comm, Buffer buffer, int root, std::int64_t chunk_bytes = 1 << 20);
  // Blocks until this rank's buffer holds the root's bytes (and it forwarded them).
  void run();

 private:
  std::shared_ptr<Communicator> comm_;
  Buffer buffer_;
  int root_;
  std::int64_t chunk_bytes_;
};

}  // namespace aiacc::ring
