// Allgather: every rank contributes `count` elements; afterwards every rank holds all ranks'
// contributions in rank order. Ring algorithm: n - 1 steps, each passing one block on.
#pragma once

#include <memory>

#include "ring/buffer.h"
#include "ring/communicator.h"

namespace aiacc::ring {

class Allgather {
 public:
  // `buffer` holds world_size blocks of `buffer.count / world_size` elements; this rank's own
  // block (at index rank) is the input. ConfigError if count is not a multiple of the world.
  Allgather(std::shared_ptr<Communicator> comm, Buffer buffer);
  // Blocks until every block is filled.
  void run();

 private:
  std::shared_ptr<Communicator> comm_;
  Buffer buffer_;
};

}  // namespace aiacc::ring
