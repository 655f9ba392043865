#include "ring/detail/host_segment.h"

#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/net/peer_timeout_error.h"
#include "core/util/cpus.h"

namespace aiacc::ring::detail {
namespace {

using Counter = std::atomic<std::uint64_t>;
static_assert(Counter::is_always_lock_free, "shared-memory counters must be lock-free (address-free)");
constexpr std::size_t kLine = 64;      // one counter per cache line: no false sharing
constexpr std::size_t kAlign = 4096;   // the data region starts on a page

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// Control block: per local rank four lines: its arrival counter, its process id, and the CPUs it
// may run on (a cpu_set_t, written once before its first arrival).
constexpr std::size_t kLinesPerRank = 4;
static_assert(sizeof(cpu_set_t) <= 2 * kLine, "a CPU mask fits the rank's last two control lines");
std::byte* rank_lines(std::byte* control, int local) { return control + kLinesPerRank * kLine * static_cast<std::size_t>(local); }
Counter& arrivals(std::byte* control, int local) { return *reinterpret_cast<Counter*>(rank_lines(control, local)); }
Counter& pid_of(std::byte* control, int local) { return *reinterpret_cast<Counter*>(rank_lines(control, local) + kLine); }
std::byte* cpus_of(std::byte* control, int local) { return rank_lines(control, local) + 2 * kLine; }

// After the per-rank lines: a 32-bit futex word bumped by every arrival, and the number of
// ranks sleeping on it (so arrivals skip the wake-up syscall when nobody sleeps).
using Word = std::atomic<std::uint32_t>;
static_assert(Word::is_always_lock_free && sizeof(Word) == 4, "futex words are 32-bit lock-free atomics");
Word& epoch(std::byte* control, int local_size) { return *reinterpret_cast<Word*>(rank_lines(control, local_size)); }
Word& sleepers(std::byte* control, int local_size) { return *reinterpret_cast<Word*>(rank_lines(control, local_size) + kLine); }

// Sleeps while `word` holds `seen`, at most `timeout_ns` (a shared, not private, futex: the
// word lives in memory mapped by several processes).
void futex_wait(Word& word, std::uint32_t seen, long timeout_ns) {
  timespec timeout{0, timeout_ns};
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}
void futex_wake_all(Word& word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

std::atomic<std::uint64_t> segment_counter{0};

std::size_t control_bytes_for(std::size_t local_size) { return round_up(kLine * (kLinesPerRank * local_size + 2), kAlign); }

// The CPUs this process may run on (util::allowed_cpus) as a mask; every online CPU when that
// is unknown.
cpu_set_t allowed_cpu_mask() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cpus = util::allowed_cpus();
  if (cpus.empty()) {
    const long online = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    for (long c = 0; c < online && c < CPU_SETSIZE; ++c) cpus.push_back(static_cast<int>(c));
  }
  for (const int c : cpus) CPU_SET(c, &mask);
  return mask;
}

// The leader creates the segment and hands its name to the other local ranks; once every one
// has mapped it, the name goes (nothing outlives the job).
SharedMemory map_segment(Communicator& comm, const std::vector<int>& local_ranks, std::size_t total,
                         std::uint64_t tag, std::string_view what) {
  const auto deadline = comm.deadline();
  const int leader = local_ranks.front();
  if (comm.rank() == leader) {
    const std::string name = fmt::format("{}{}-{}", segment_prefix(getpid()), tag, segment_counter++);
    SharedMemory memory = SharedMemory::create(name, total);
    for (std::size_t i = 1; i < local_ranks.size(); ++i) {
      comm.to(local_ranks[i], 0).send({reinterpret_cast<const std::byte*>(name.data()), name.size()}, deadline,
                                      fmt::format("{}: segment name", what));
    }
    for (std::size_t i = 1; i < local_ranks.size(); ++i) {
      comm.from(local_ranks[i], 0).recv(deadline, fmt::format("{}: segment mapped", what));
    }
    memory.unlink();
    return memory;
  }
  net::Message message = comm.from(leader, 0).recv(deadline, fmt::format("{}: segment name", what));
  const std::string name(reinterpret_cast<const char*>(message.bytes().data()), message.size());
  SharedMemory memory = SharedMemory::open(name, total);
  comm.to(leader, 0).send({}, deadline, fmt::format("{}: segment mapped", what));
  return memory;
}

}  // namespace

bool ranks_outnumber_cpus(std::span<const cpu_set_t> masks) {
  const int size = static_cast<int>(masks.size());
  cpu_set_t all;
  CPU_ZERO(&all);
  for (const cpu_set_t& mask : masks) CPU_OR(&all, &all, &mask);
  if (size > CPU_COUNT(&all)) return true;
  // Some ranks may still be confined to fewer CPUs than there are of them (two pinned to one
  // core beside an unpinned third): count, for each mask, the ranks whose mask lies inside it.
  for (const cpu_set_t& outer : masks) {
    int inside = 0;
    for (const cpu_set_t& inner : masks) {
      cpu_set_t common;
      CPU_AND(&common, &inner, &outer);
      if (CPU_EQUAL(&common, &inner)) ++inside;
    }
    if (inside > CPU_COUNT(&outer)) return true;
  }
  return false;
}

HostSegment::HostSegment(Communicator& comm, const std::vector<int>& local_ranks, std::size_t data_bytes,
                         std::uint64_t tag, std::string owner)
    : owner_(std::move(owner)),
      local_ranks_(local_ranks),
      local_index_(static_cast<int>(std::find(local_ranks.begin(), local_ranks.end(), comm.rank()) - local_ranks.begin())),
      control_bytes_(control_bytes_for(local_ranks.size())),
      memory_(map_segment(comm, local_ranks, control_bytes_ + round_up(std::max<std::size_t>(data_bytes, 1), kAlign), tag, owner_)) {
  pid_of(memory_.data(), local_index_).store(static_cast<std::uint64_t>(getpid()));
  const cpu_set_t cpus = allowed_cpu_mask();
  std::memcpy(cpus_of(memory_.data(), local_index_), &cpus, sizeof cpus);
}

void HostSegment::wait_all(std::uint64_t generation, std::string_view what, net::Deadline deadline) {
  wait_for_arrivals(generation, what, deadline);
  if (cpus_known_) return;
  // Every rank wrote its CPU mask before its first arrival, so all masks are visible now.
  std::vector<cpu_set_t> masks(static_cast<std::size_t>(local_size()));
  for (int l = 0; l < local_size(); ++l) {
    std::memcpy(&masks[static_cast<std::size_t>(l)], cpus_of(memory_.data(), l), sizeof(cpu_set_t));
  }
  oversubscribed_ = ranks_outnumber_cpus(masks);
  cpus_known_ = true;
}

void HostSegment::wait_for_arrivals(std::uint64_t generation, std::string_view what, net::Deadline deadline) {
  std::byte* control = memory_.data();
  const int size = local_size();
  Word& changed = epoch(control, size);
  Word& sleeping = sleepers(control, size);
  arrivals(control, local_index_).store(generation, std::memory_order_seq_cst);
  changed.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_seq_cst) > 0) futex_wake_all(changed);
  auto all_arrived = [&] {
    for (int l = 0; l < size; ++l) {
      if (arrivals(control, l).load(std::memory_order_acquire) < generation) return false;
    }
    return true;
  };
  auto pause = [] {
#if defined(__x86_64__)
    _mm_pause();
#endif
  };
  if (!oversubscribed_) {
    // Every local rank can have a core: peers arrive within microseconds to a few hundred (a
    // step's jitter), and a spinning waiter keeps its vCPU awake, where waking a sleeping one
    // costs tens of microseconds in a VM. No sched_yield: beside other busy processes it gives
    // one of them a whole time slice (milliseconds), while a futex sleeper is woken at once.
    const auto spin_until = net::Clock::now() + std::chrono::microseconds(200);
    for (int i = 0;; ++i) {
      if (all_arrived()) return;
      pause();
      if ((i & 63) == 63 && net::Clock::now() > spin_until) break;
    }
  } else {
    // The peer we wait for may be queued on this very core: yield it the core at once (200
    // pauses first cost ~5 us per barrier on 4 ranks over 2 cores), for up to ~2 ms, then sleep
    // (sleeping at once would idle a vCPU that then has to be woken).
    const auto yield_until = net::Clock::now() + std::chrono::microseconds(2000);
    for (int i = 0;; ++i) {
      if (all_arrived()) return;
      sched_yield();
      if ((i & 63) == 63 && net::Clock::now() > yield_until) break;
    }
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
    for (int l = 0; l < size; ++l) {
      if (arrivals(control, l).load() >= generation) continue;
      const int rank = local_ranks_[static_cast<std::size_t>(l)];
      missing.push_back(rank);
      const auto pid = static_cast<pid_t>(pid_of(control, l).load());
      if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) dead.push_back(rank);
    }
    if (!dead.empty()) {
      throw CommError(fmt::format("{} ({}): local rank(s) {} died (process gone)", owner_, what, fmt::join(dead, ", ")));
    }
    if (missing.empty()) continue;  // the last arrived meanwhile: the loop returns
    if (now >= deadline) {
      // Any missing rank holds this one up: the first is the one to ask (ring/wait_chain.h).
      throw net::PeerTimeoutError(
          fmt::format("{} ({}): timed out waiting for local rank(s) {}", owner_, what, fmt::join(missing, ", ")),
          missing.front());
    }
  }
}

}  // namespace aiacc::ring::detail
