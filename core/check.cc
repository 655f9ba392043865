// Out-of-line throw helpers for core/check.h: keeps the macros' inline footprint small.
#include "core/check.h"

#include <zmq.h>

#include <cstring>

namespace aiacc::detail {

namespace {
std::string base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

void throw_check_failure(const char* file, int line, const char* expression,
                         const std::string& detail) {
  std::string message = fmt::format("internal check failed at {}:{}: {}", base_name(file), line,
                                    expression);
  if (!detail.empty()) message += " " + detail;
  throw InternalError(message);
}

void throw_syscall_failure(const char* file, int line, const char* expression,
                           int error_number) {
  throw IoError(fmt::format("{} failed: {} (errno {}) at {}:{}", expression,
                            std::strerror(error_number), error_number, base_name(file), line));
}

void throw_zmq_failure(const char* file, int line, const char* expression, int error_number) {
  throw CommError(fmt::format("{} failed: {} (errno {}) at {}:{}", expression,
                              zmq_strerror(error_number), error_number, base_name(file), line));
}

}  // namespace aiacc::detail
