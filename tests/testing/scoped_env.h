// Test helper: an environment variable set (or removed) for one scope, so that a failing
// assertion, which returns from the test early, cannot leave it behind for later tests.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

namespace aiacc::testing {

// Sets `name` to `value` (or with std::nullopt removes it) until the end of the scope, then
// puts back what was there before, including its absence. Not thread-safe: setenv and getenv
// race with other threads reading the environment.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    const int status = value ? ::setenv(name, value->c_str(), 1) : ::unsetenv(name);
    if (status != 0) {
      throw std::system_error(errno, std::generic_category(),
                              std::string(value ? "setenv " : "unsetenv ") + name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace aiacc::testing
