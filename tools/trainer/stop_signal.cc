#include "tools/trainer/stop_signal.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "core/error.h"

namespace aiacc::trainer {
namespace {

std::atomic<int> g_received{0};
std::atomic<long long> g_first_ns{0};
std::atomic<bool> g_installed{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<long long>::is_always_lock_free,
              "signal handlers may only touch lock-free atomics");

// A repeat within this long of the first is the same stop delivered twice (systemctl stop or
// pkill signals every process, and the local launcher forwards its own copy), not a user
// insisting.
constexpr long long kRepeatWindowNs = 1'000'000'000;

long long monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  return static_cast<long long>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

void record_stop(int signal) {
  const int saved_errno = errno;
  const long long now = monotonic_ns();
  int none = 0;
  if (g_received.compare_exchange_strong(none, signal)) {
    g_first_ns.store(now);
  } else if (now - g_first_ns.load() > kRepeatWindowNs) {
    // A second stop: end now. _exit, not the default action, which PID 1 of a container
    // (the Kubernetes manifest's aiacc-train) would ignore.
    _exit(stopped_exit_status(signal));
  }
  errno = saved_errno;
}

}  // namespace

StopSignals::StopSignals() {
  if (g_installed.exchange(true)) throw InternalError("StopSignals: one instance at a time");
  g_received.store(0);
  struct sigaction action {};
  action.sa_handler = record_stop;
  sigemptyset(&action.sa_mask);
  // Restarts reads and writes the signal interrupts; poll and sleeps return EINTR whatever the
  // flag, and their callers retry.
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  g_installed.store(false);
}

int StopSignals::received() const { return g_received.load(); }

int stopped_exit_status(int signal) { return 128 + signal; }

bool is_stopped_exit_status(int status) {
  return status == stopped_exit_status(SIGINT) || status == stopped_exit_status(SIGTERM);
}

}  // namespace aiacc::trainer
