// SIGINT and SIGTERM as a request to stop, not as death: a preempted job (Kubernetes deleting a
// pod, Slurm's preemption, a user's Ctrl-C) saves a checkpoint at a step the workers agree on
// and exits, instead of losing the steps since the last checkpoint.
#pragma once

#include <csignal>

namespace aiacc::trainer {

// While alive, the first SIGINT or SIGTERM is recorded (received()); another one more than a
// second later ends the process at once with 128 + that signal (a stop that hangs can still be
// ended), while one within the second is taken for the same stop delivered twice. The previous
// handlers come back on destruction. One instance at a time.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received (SIGINT or SIGTERM), or 0.
  int received() const;

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

// The exit status of a process that stopped cleanly on `signal` (after its checkpoint): 128 +
// the signal, as a shell reports a process the signal ended, so schedulers that requeue
// preempted jobs see the usual status. The local launcher tells it from a death by the signal:
// the process exited with it.
int stopped_exit_status(int signal);
// Whether a child's exit status (from WEXITSTATUS) is such a clean stop.
bool is_stopped_exit_status(int status);

}  // namespace aiacc::trainer
