#include "ring/hierarchical_allreduce.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "ring/detail/element_ops.h"

namespace aiacc::ring {
namespace {

using Counter = std::atomic<std::uint64_t>;
static_assert(Counter::is_always_lock_free, "shared-memory counters must be lock-free (address-free)");
constexpr std::size_t kLine = 64;      // one counter per cache line: no false sharing
constexpr std::size_t kAlign = 4096;   // data regions start on pages
// With more than two ranks on a host, each summing every slot itself pays only while all the
// chunks of one step fit in a core's cache.
constexpr std::int64_t kDirectHostBytes = 256 << 10;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// Control block: per local rank, its arrival counter (line 2l) and its process id (line 2l+1).
Counter& arrivals(std::byte* control, int local) { return *reinterpret_cast<Counter*>(control + 2 * kLine * static_cast<std::size_t>(local)); }
Counter& pid_of(std::byte* control, int local) { return *reinterpret_cast<Counter*>(control + (2 * static_cast<std::size_t>(local) + 1) * kLine); }

std::atomic<std::uint64_t> segment_counter{0};

// After the per-rank lines: a 32-bit futex word bumped by every arrival, and the number of
// ranks sleeping on it (so arrivals skip the wake-up syscall when nobody sleeps).
using Word = std::atomic<std::uint32_t>;
static_assert(Word::is_always_lock_free && sizeof(Word) == 4, "futex words are 32-bit lock-free atomics");
Word& epoch(std::byte* control, int local_size) { return *reinterpret_cast<Word*>(control + 2 * kLine * static_cast<std::size_t>(local_size)); }
Word& sleepers(std::byte* control, int local_size) { return *reinterpret_cast<Word*>(control + (2 * static_cast<std::size_t>(local_size) + 1) * kLine); }

// Sleeps while `word` holds `seen`, at most `timeout_ns` (a shared, not private, futex: the
// word lives in memory mapped by several processes).
void futex_wait(Word& word, std::uint32_t seen, long timeout_ns) {
  timespec timeout{0, timeout_ns};
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}
void futex_wake_all(Word& word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace

HierarchicalAllreduce::HierarchicalAllreduce(std::shared_ptr<Communicator> comm, Buffer buffer, AllreduceSpec spec)
    : comm_(std::move(comm)), buffer_(buffer), spec_(spec), local_ranks_(comm_->local_ranks()) {
  if (spec.wire != WireType::kNative) {
    throw ConfigError("hierarchical allreduce: the wire type must be native (compression applies to the flat ring)");
  }
  detail::make_wire_format(buffer.dtype, WireType::kNative, "hierarchical allreduce");
  local_index_ = static_cast<int>(std::find(local_ranks_.begin(), local_ranks_.end(), comm_->rank()) - local_ranks_.begin());
  const int local_size = static_cast<int>(local_ranks_.size());
  const int leader = local_ranks_.front();
  const std::uint64_t sequence = comm_->next_sequence();
  control_bytes_ = round_up(2 * kLine * static_cast<std::size_t>(local_size + 1), kAlign);
  chunk_elements_ = std::max<std::int64_t>(1, spec.chunk_bytes / static_cast<std::int64_t>(buffer.element_bytes()));
  // One host, two ranks (or a few ranks and small chunks): every rank sums all the slots of a
  // chunk itself, straight into its buffer. That takes one barrier per chunk instead of two and
  // no copy back, for reads that grow with the number of ranks (L chunks each instead of 2).
  const std::int64_t chunk_bytes = std::min(buffer.count, chunk_elements_) * static_cast<std::int64_t>(buffer.element_bytes());
  direct_ = local_size > 1 && comm_->host_leaders().size() == 1 &&
            (local_size == 2 || chunk_bytes * local_size <= kDirectHostBytes);
  // Direct: two sets of L chunk-sized slots, used alternately (see run()). Otherwise L slots of
  // the whole buffer plus the result.
  slot_bytes_ = round_up(static_cast<std::size_t>(std::max<std::int64_t>(direct_ ? chunk_bytes : buffer.bytes(), 1)), kAlign);
  const std::size_t slots = direct_ ? 2 * static_cast<std::size_t>(local_size) : static_cast<std::size_t>(local_size + 1);
  const std::size_t total = control_bytes_ + slot_bytes_ * slots;
  const auto deadline = comm_->deadline();

  if (local_size > 1) {
    if (comm_->rank() == leader) {
      const std::string name = fmt::format("/aiacc-{}-{}-{}", getpid(), sequence, segment_counter++);
      memory_.emplace(SharedMemory::create(name, total));
      for (int i = 1; i < local_size; ++i) {
        comm_->to(local_ranks_[static_cast<std::size_t>(i)], 0)
            .send({reinterpret_cast<const std::byte*>(name.data()), name.size()}, deadline, "hierarchical allreduce: segment name");
      }
      // Once every local rank has mapped it, the name can go: nothing outlives the job.
      for (int i = 1; i < local_size; ++i) {
        comm_->from(local_ranks_[static_cast<std::size_t>(i)], 0).recv(deadline, "hierarchical allreduce: segment mapped");
      }
      memory_->unlink();
    } else {
      net::Message message = comm_->from(leader, 0).recv(deadline, "hierarchical allreduce: segment name");
      const std::string name(reinterpret_cast<const char*>(message.bytes().data()), message.size());
      memory_.emplace(SharedMemory::open(name, total));
      comm_->to(leader, 0).send({}, deadline, "hierarchical allreduce: segment mapped");
    }
    pid_of(memory_->data(), local_index_).store(static_cast<std::uint64_t>(getpid()));
    result_ = memory_->data() + control_bytes_;
  } else {
    result_ = static_cast<std::byte*>(buffer.data);  // alone on the host: reduce in place
  }
  const auto leaders = comm_->host_leaders();
  if (comm_->rank() == leader && leaders.size() > 1) {
    AllreduceSpec sum = spec;
    sum.op = ReduceOp::kSum;
    leaders_ring_.emplace(comm_, Buffer{result_, buffer.count, buffer.dtype}, sum, leaders);
  }
}

std::byte* HierarchicalAllreduce::slot(int local) const {
  return memory_->data() + control_bytes_ + slot_bytes_ * static_cast<std::size_t>(local + 1);
}

std::byte* HierarchicalAllreduce::direct_slot(std::uint64_t generation, int local) const {
  const auto set = static_cast<std::size_t>(generation & 1);
  return memory_->data() + control_bytes_ + slot_bytes_ * (set * local_ranks_.size() + static_cast<std::size_t>(local));
}

void HierarchicalAllreduce::wait_all(std::uint64_t generation, std::string_view what, net::Deadline deadline) {
  std::byte* control = memory_->data();
  const int local_size = static_cast<int>(local_ranks_.size());
  Word& changed = epoch(control, local_size);
  Word& sleeping = sleepers(control, local_size);
  arrivals(control, local_index_).store(generation, std::memory_order_seq_cst);
  changed.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_seq_cst) > 0) futex_wake_all(changed);
  auto all_arrived = [&] {
    for (int l = 0; l < local_size; ++l) {
      if (arrivals(control, l).load(std::memory_order_acquire) < generation) return false;
    }
    return true;
  };
  // Spin briefly (peers on free cores arrive within microseconds), then sleep on the futex:
  // with more ranks than cores, spinning would keep the very peer we wait for off the CPU.
  for (int spin = 0; spin < 200; ++spin) {
    if (all_arrived()) return;
#if defined(__x86_64__)
    _mm_pause();
#endif
  }
  // Then yield the core for up to ~2 ms (a runnable peer on this core gets it at once; an idle
  // vCPU would have to be woken, which costs tens of microseconds in a VM), then sleep.
  const auto yield_until = net::Clock::now() + std::chrono::microseconds(2000);
  for (int i = 0;; ++i) {
    if (all_arrived()) return;
    sched_yield();
    if ((i & 63) == 63 && net::Clock::now() > yield_until) break;
  }
  auto next_liveness_check = net::Clock::now() + std::chrono::milliseconds(100);
  for (;;) {
    const std::uint32_t seen = changed.load(std::memory_order_seq_cst);
    if (all_arrived()) return;
    sleeping.fetch_add(1, std::memory_order_seq_cst);
    // Re-check after announcing ourselves: an arrival between the check and the sleep either
    // saw us sleeping (and wakes us) or changed the word (and the wait returns at once).
    if (!all_arrived()) futex_wait(changed, seen, 20'000'000);  // 20 ms: liveness and deadline checks
    sleeping.fetch_sub(1, std::memory_order_seq_cst);
    if (all_arrived()) return;
    const auto now = net::Clock::now();
    if (now < next_liveness_check && now < deadline) continue;
    next_liveness_check = now + std::chrono::milliseconds(100);
    std::vector<int> missing, dead;
    for (int l = 0; l < local_size; ++l) {
      if (arrivals(control, l).load() >= generation) continue;
      const int rank = local_ranks_[static_cast<std::size_t>(l)];
      missing.push_back(rank);
      const auto pid = static_cast<pid_t>(pid_of(control, l).load());
      if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) dead.push_back(rank);
    }
    if (!dead.empty()) {
      throw CommError(fmt::format("hierarchical allreduce ({}): local rank(s) {} died (process gone)", what,
                                  fmt::join(dead, ", ")));
    }
    if (now >= deadline) {
      throw TimeoutError(fmt::format("hierarchical allreduce ({}): timed out waiting for local rank(s) {}", what,
                                     fmt::join(missing, ", ")));
    }
  }
}

void HierarchicalAllreduce::sum_slots(std::size_t offset, std::size_t count) {
  if (count == 0) return;
  const detail::WireFormat format{buffer_.dtype, WireType::kNative};
  std::memcpy(result_ + offset, slot(0) + offset, count * buffer_.element_bytes());
  for (int l = 1; l < static_cast<int>(local_ranks_.size()); ++l) {
    detail::accumulate(format, result_ + offset, slot(l) + offset, count);
  }
}

void HierarchicalAllreduce::run() {
  if (comm_->world_size() == 1 || buffer_.count == 0) return;
  const auto deadline = comm_->deadline();
  const int local_size = static_cast<int>(local_ranks_.size());
  const std::size_t element = buffer_.element_bytes();
  if (direct_) {
    // A chunk's slots are written again two chunks later, by which time every rank has passed
    // the barrier of the chunk in between, so has finished reading them.
    const detail::WireFormat format{buffer_.dtype, WireType::kNative};
    auto* data = static_cast<std::byte*>(buffer_.data);
    for (std::int64_t begin = 0; begin < buffer_.count; begin += chunk_elements_) {
      const auto size = static_cast<std::size_t>(std::min(chunk_elements_, buffer_.count - begin));
      std::byte* chunk = data + static_cast<std::size_t>(begin) * element;
      const std::uint64_t generation = ++generation_;
      std::memcpy(direct_slot(generation, local_index_), chunk, size * element);
      wait_all(generation, "inputs written", deadline);
      // The same sum, in local-rank order, on every rank: the results are bitwise equal.
      if (local_index_ != 0) std::memcpy(chunk, direct_slot(generation, 0), size * element);
      for (int l = 1; l < local_size; ++l) detail::accumulate(format, chunk, direct_slot(generation, l), size);
      if (spec_.op == ReduceOp::kAverage) detail::scale(buffer_.dtype, chunk, size, 1.0 / comm_->world_size());
    }
    return;
  }
  if (local_size > 1 && !leaders_ring_ && comm_->host_leaders().size() == 1) {
    // One host: nothing crosses the network, so the buffer is reduced in chunks that stay in
    // cache between being written, summed and read back (L + 1 copies of a chunk in flight).
    const std::int64_t chunk = std::max<std::int64_t>(1, spec_.chunk_bytes / static_cast<std::int64_t>(element));
    auto* data = static_cast<std::byte*>(buffer_.data);
    for (std::int64_t begin = 0; begin < buffer_.count; begin += chunk) {
      const std::int64_t size = std::min(chunk, buffer_.count - begin);
      const std::size_t at = static_cast<std::size_t>(begin) * element;
      std::memcpy(slot(local_index_) + at, data + at, static_cast<std::size_t>(size) * element);
      wait_all(++generation_, "inputs written", deadline);
      const Range part = split_even(size, local_size, local_index_);
      sum_slots(at + static_cast<std::size_t>(part.begin) * element, static_cast<std::size_t>(part.size()));
      wait_all(++generation_, "host sum", deadline);
      std::memcpy(data + at, result_ + at, static_cast<std::size_t>(size) * element);
    }
    if (spec_.op == ReduceOp::kAverage) {
      detail::scale(buffer_.dtype, buffer_.data, static_cast<std::size_t>(buffer_.count), 1.0 / comm_->world_size());
    }
    return;
  }
  if (local_size > 1) {
    std::memcpy(slot(local_index_), buffer_.data, buffer_.bytes());
    wait_all(++generation_, "inputs written", deadline);
    // This rank's 1/L slice: the sum over slots in local-rank order.
    const Range slice = split_even(buffer_.count, local_size, local_index_);
    sum_slots(static_cast<std::size_t>(slice.begin) * element, static_cast<std::size_t>(slice.size()));
    wait_all(++generation_, "host sum", deadline);
  }
  if (leaders_ring_) leaders_ring_->run();
  if (local_size > 1) {
    if (leaders_ring_ || comm_->host_leaders().size() > 1) wait_all(++generation_, "leaders' exchange", deadline);
    std::memcpy(buffer_.data, result_, buffer_.bytes());
  }
  if (spec_.op == ReduceOp::kAverage) {
    detail::scale(buffer_.dtype, buffer_.data, static_cast<std::size_t>(buffer_.count), 1.0 / comm_->world_size());
  }
}

}  // namespace aiacc::ring
