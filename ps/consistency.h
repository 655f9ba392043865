// The consistency models of a table, as state machines without networking (the server feeds
// them requests and sends the replies they release). shared/DESIGN.md §5:
//   SyncAggregator   synchronous: a step's pushes from every worker are merged, then applied.
//   StalenessClock   bounded staleness: a worker may be at most s steps ahead of the slowest.
// Asynchronous tables need neither: every push is applied as it arrives.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace aiacc::ps {

// One worker's push for one step, kept (with the buffers it points into) until the step is
// complete. `reply_to` and `seq` let the server answer it once applied.
struct Contribution {
  int worker = 0;
  std::uint64_t seq = 0;
  std::span<const std::int64_t> ids;  // unique within the contribution
  const float* grads = nullptr;       // [ids.size(), dim]
  double lr = 0.0;
  std::shared_ptr<const void> owner;  // keeps ids and grads alive
  std::string reply_to;               // the server's routing id of the connection
};

struct ReadyStep {
  std::uint64_t step = 0;
  std::vector<std::int64_t> ids;  // unique, in order of first appearance (worker 0 first)
  std::vector<float> grads;       // [ids.size(), dim]: sum over workers (/ W when averaging)
  double lr = 0.0;                // worker 0's learning rate
  std::vector<Contribution> contributions;  // in worker order
};

// Not thread-safe (owned by the shard's request thread).
class SyncAggregator {
 public:
  SyncAggregator(int num_workers, bool average, int dim);

  // Records `c` for `step`. Throws CommError naming the worker and step when the worker is out
  // of range, already pushed for this step (with another sequence number) or the step was
  // already applied (a worker fell out of lock-step).
  void add(std::uint64_t step, Contribution c);
  // Whether (worker, seq) is a recorded contribution still waiting for its step.
  bool pending(int worker, std::uint64_t seq) const;
  // The oldest step all workers have contributed to, merged; false when none is complete.
  // Gradients are summed in worker order (so the result does not depend on arrival order).
  bool pop_ready(ReadyStep& out);
  // "step 7: waiting for workers 1, 3" for the oldest incomplete step ("" when none).
  std::string describe_waiting() const;
  // Seconds since the first push of the oldest incomplete step arrived (0 when none waits).
  double oldest_wait_seconds() const;
  // Removes and returns every recorded contribution (to answer them with an error when the
  // shard gives up on a step).
  std::vector<Contribution> take_waiting();

 private:
  int num_workers_;
  bool average_;
  int dim_;
  bool any_applied_ = false;
  std::uint64_t applied_through_ = 0;
  std::map<std::uint64_t, std::vector<Contribution>> steps_;  // step -> contributions by worker
  std::map<std::uint64_t, std::chrono::steady_clock::time_point> first_arrival_;  // step -> its first push
};

// Not thread-safe (owned by the shard's request thread).
class StalenessClock {
 public:
  StalenessClock(int num_workers, int staleness);
  // `worker` completed `step` (its clock becomes at least step + 1).
  void advance(int worker, std::uint64_t step);
  // `worker` has completed `steps` steps (its clock becomes at least that): what a pull at step
  // `steps` says. A resumed job's workers pull before any push; without it their clocks stayed
  // at 0 and every pull past the bound waited for pushes that could not come.
  void completed(int worker, std::uint64_t steps);
  // A pull of a worker that has completed `step` steps may be served.
  bool may_serve(std::uint64_t step) const { return lag(step) <= staleness_; }
  // step - (steps completed by the slowest worker), at least 0.
  std::int64_t lag(std::uint64_t step) const;
  std::uint64_t min_clock() const;
  int slowest_worker() const;
  int staleness() const { return staleness_; }

 private:
  int staleness_;
  std::vector<std::uint64_t> clock_;  // per worker: steps completed
};

}  // namespace aiacc::ps
