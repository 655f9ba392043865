#include "ring/barrier.h"

#include <fmt/format.h>

namespace aiacc::ring {

void barrier(Communicator& comm, std::string_view what) {
  const int n = comm.world_size(), rank = comm.rank();
  const auto deadline = comm.deadline();
  for (int distance = 1; distance < n; distance *= 2) {
    const std::string label = fmt::format("{} (round {})", what, distance);
    comm.to((rank + distance) % n, 0).send({}, deadline, label);
    comm.from((rank - distance % n + n) % n, 0).recv(deadline, label);
  }
}

}  // namespace aiacc::ring
