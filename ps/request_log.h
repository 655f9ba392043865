// RequestLog: which (worker, session, seq) requests a shard has already seen, so that a retried
// or duplicated push is applied once (shared/DESIGN.md §5). A client numbers its requests to a
// shard 1, 2, 3, ... per session (a random id per client incarnation); the log keeps, per
// worker, the highest seq below which everything was seen (the floor) plus the seen seqs above
// it, so its size stays bounded by the requests in flight, not by the job's length. A seq that
// never arrives (a request the client failed before sending it) would hold the floor below it
// for good, so at most kMaxTracked seqs are kept above a floor: beyond that the floor moves past
// the oldest gap, whose seqs are remembered (up to kMaxSkipped ranges) so that the request, if
// it does arrive late (a retry after a lost frame), is still taken as new.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <utility>

namespace aiacc::ps {

// Not thread-safe (owned by the shard's request thread).
class RequestLog {
 public:
  // Records (worker, session, seq); returns true when it is new, false for a repeat. A new
  // session of a worker (a restarted client) starts that worker's log afresh.
  bool record(std::uint32_t worker, std::uint64_t session, std::uint64_t seq) {
    Worker& w = workers_[worker];
    if (w.session != session) w = Worker{session, 0, {}, {}};
    if (seq <= w.floor) return take_skipped(w, seq);
    if (w.above.count(seq) != 0) return false;
    w.above.insert(seq);
    if (w.above.size() > kMaxTracked) {
      // Skip the oldest gap, remembering its seqs.
      const std::uint64_t next = *w.above.begin();
      w.skipped.emplace_back(w.floor + 1, next - 1);
      if (w.skipped.size() > kMaxSkipped) w.skipped.pop_front();
      w.floor = next - 1;
    }
    // Advance the floor over the contiguous prefix.
    while (!w.above.empty() && *w.above.begin() == w.floor + 1) {
      ++w.floor;
      w.above.erase(w.above.begin());
    }
    return true;
  }
  static constexpr std::size_t kMaxTracked = 4096;
  static constexpr std::size_t kMaxSkipped = 1024;
  // Seqs tracked above the floors (for tests: stays small while requests are contiguous).
  std::size_t tracked() const {
    std::size_t n = 0;
    for (const auto& [id, w] : workers_) n += w.above.size();
    return n;
  }

 private:
  struct Worker {
    std::uint64_t session = 0;
    std::uint64_t floor = 0;
    std::set<std::uint64_t> above;
    std::deque<std::pair<std::uint64_t, std::uint64_t>> skipped;  // [first, last] seqs below the floor never seen
  };
  // A seq below the floor is new only if it lies in a skipped gap; it is taken out of it.
  static bool take_skipped(Worker& w, std::uint64_t seq) {
    for (auto it = w.skipped.begin(); it != w.skipped.end(); ++it) {
      auto& [first, last] = *it;
      if (seq < first || seq > last) continue;
      if (first == last) {
        w.skipped.erase(it);
      } else if (seq == first) {
        ++first;
      } else if (seq == last) {
        --last;
      } else {
        const std::uint64_t tail_first = seq + 1, tail_last = last;
        last = seq - 1;
        w.skipped.insert(it + 1, {tail_first, tail_last});
      }
      return true;
    }
    return false;
  }
  std::map<std::uint32_t, Worker> workers_;
};

}  // namespace aiacc::ps
