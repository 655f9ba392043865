// WakeSignal: eventfd creation, increment, drain.
#include "core/net/wake_signal.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "core/check.h"

namespace aiacc::net {

WakeSignal::WakeSignal() : fd_(AIACC_SYSCALL(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))) {}

WakeSignal::~WakeSignal() { ::close(fd_); }

void WakeSignal::notify() {
  const std::uint64_t one = 1;
  AIACC_SYSCALL(::write(fd_, &one, sizeof one));
}

void WakeSignal::clear() noexcept {
  std::uint64_t drained = 0;
  // EAGAIN: nothing pending (non-blocking descriptor); there is no other failure to handle.
  if (::read(fd_, &drained, sizeof drained) < 0) return;
}

}  // namespace aiacc::net
