// HostAllgather: every rank's byte message (sizes may differ), in rank order, for ranks that
// all share one host. Each rank writes its message into its slot of a shared segment, one
// barrier, and every rank reads the others' messages where they lie: one copy per message and
// no sockets. Slots come in two sets used alternately, so a message stays readable until the
// caller's next run(). When a message outgrows the slots, every rank sees it after the barrier,
// and all of them map a larger segment and exchange again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "ring/communicator.h"
#include "ring/detail/host_segment.h"

namespace aiacc::ring {

class HostAllgather {
 public:
  // True when every rank of `comm` is on one host (the only layout this class serves).
  static bool applies(const Communicator& comm);

  // Collective among all ranks of `comm` (ConfigError unless applies()). `capacity_bytes`: the
  // first slot size; it grows as needed.
  explicit HostAllgather(std::shared_ptr<Communicator> comm, std::size_t capacity_bytes = 64 << 10);

  // Collective: every rank's `mine`, in rank order. The views stay valid until the next run()
  // (with one rank, the view is `mine` itself). CommError when a rank wrote more than 4 GiB.
  std::vector<std::span<const std::byte>> run(std::span<const std::byte> mine);

  std::size_t capacity_bytes() const { return capacity_; }

 private:
  void map(std::size_t capacity);
  std::byte* slot(std::uint64_t generation, int rank) const;

  std::shared_ptr<Communicator> comm_;
  std::size_t capacity_ = 0;  // message bytes per slot (after its 8-byte size)
  std::optional<detail::HostSegment> segment_;
  std::uint64_t generation_ = 0;
};

}  // namespace aiacc::ring
