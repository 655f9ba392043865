// Test helper: a full disk without filling one. Under RLIMIT_FSIZE (ulimit -f) a write past the
// limit fails with EFBIG, as one past a full disk's end fails with ENOSPC, and unlike a full
// disk it holds for root too.
#pragma once

#include <sys/resource.h>

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <string>
#include <system_error>

namespace aiacc::testing {

// Files this process writes end at `bytes` until the end of the scope. SIGXFSZ is ignored
// meanwhile, or its default action would kill the process instead of failing the write. The
// destructor restores the limit, then the previous SIGXFSZ handler. Not thread-safe: the limit
// and the handler are the whole process's.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(std::size_t bytes) {
    if (::getrlimit(RLIMIT_FSIZE, &saved_) != 0) {
      throw std::system_error(errno, std::generic_category(), "getrlimit RLIMIT_FSIZE");
    }
    handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = saved_;
    limited.rlim_cur = static_cast<rlim_t>(bytes);
    if (::setrlimit(RLIMIT_FSIZE, &limited) != 0) {
      const int error = errno;
      std::signal(SIGXFSZ, handler_);
      throw std::system_error(error, std::generic_category(),
                              "setrlimit RLIMIT_FSIZE to " + std::to_string(bytes) + " bytes");
    }
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*handler_)(int) = SIG_DFL;
};

}  // namespace aiacc::testing
