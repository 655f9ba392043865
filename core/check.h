// Check macros: turn a failed condition or a C-library status into a typed exception whose
// message holds the expression, both values and the source location. They never abort.
//   AIACC_CHECK(cond [, "fmt", args...])        -> InternalError
//   AIACC_CHECK_EQ/NE/LT/LE/GT/GE(a, b [, ...])  -> InternalError "a == b (3 vs 4)"
//   AIACC_SYSCALL(expr)                          -> IoError with strerror; retries EINTR
//   AIACC_ZMQ_CHECK(expr)                        -> CommError with zmq_strerror
// CUDA, cuBLAS, cuDNN and NCCL checks live in core/cuda/cuda_check.h (built with CUDA only).
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <string>

#include "core/error.h"

namespace aiacc::detail {

[[noreturn]] void throw_check_failure(const char* file, int line, const char* expression,
                                      const std::string& detail);
[[noreturn]] void throw_syscall_failure(const char* file, int line, const char* expression,
                                        int error_number);
[[noreturn]] void throw_zmq_failure(const char* file, int line, const char* expression,
                                    int error_number);

inline std::string optional_message() { return {}; }
template <class... Args>
std::string optional_message(fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format(format, std::forward<Args>(args)...);
}

template <class A, class B>
std::string compared_values(const A& a, const B& b) {
  if constexpr (fmt::is_formattable<A>::value && fmt::is_formattable<B>::value) {
    return fmt::format("({} vs {})", a, b);
  } else {
    return "(values not printable)";
  }
}

}  // namespace aiacc::detail

#define AIACC_CHECK(condition, ...)                                              \
  do {                                                                           \
    if (!(condition)) [[unlikely]] {                                             \
      ::aiacc::detail::throw_check_failure(                                      \
          __FILE__, __LINE__, #condition,                                        \
          ::aiacc::detail::optional_message(__VA_ARGS__));                       \
    }                                                                            \
  } while (0)

#define AIACC_CHECK_OP_(op, a, b, ...)                                           \
  do {                                                                           \
    const auto& aiacc_check_a_ = (a);                                            \
    const auto& aiacc_check_b_ = (b);                                            \
    if (!(aiacc_check_a_ op aiacc_check_b_)) [[unlikely]] {                      \
      std::string aiacc_check_detail_ =                                          \
          ::aiacc::detail::compared_values(aiacc_check_a_, aiacc_check_b_);      \
      std::string aiacc_check_extra_ = ::aiacc::detail::optional_message(__VA_ARGS__); \
      if (!aiacc_check_extra_.empty()) aiacc_check_detail_ += ": " + aiacc_check_extra_; \
      ::aiacc::detail::throw_check_failure(__FILE__, __LINE__, #a " " #op " " #b, \
                                           aiacc_check_detail_);                 \
    }                                                                            \
  } while (0)

#define AIACC_CHECK_EQ(a, b, ...) AIACC_CHECK_OP_(==, a, b __VA_OPT__(, ) __VA_ARGS__)
#define AIACC_CHECK_NE(a, b, ...) AIACC_CHECK_OP_(!=, a, b __VA_OPT__(, ) __VA_ARGS__)
#define AIACC_CHECK_LT(a, b, ...) AIACC_CHECK_OP_(<, a, b __VA_OPT__(, ) __VA_ARGS__)
#define AIACC_CHECK_LE(a, b, ...) AIACC_CHECK_OP_(<=, a, b __VA_OPT__(, ) __VA_ARGS__)
#define AIACC_CHECK_GT(a, b, ...) AIACC_CHECK_OP_(>, a, b __VA_OPT__(, ) __VA_ARGS__)
#define AIACC_CHECK_GE(a, b, ...) AIACC_CHECK_OP_(>=, a, b __VA_OPT__(, ) __VA_ARGS__)

// Evaluates a syscall-style expression (returns -1 and sets errno on failure), retrying while
// it fails with EINTR. Yields the expression's value.
#define AIACC_SYSCALL(expression)                                                \
  ([&]() {                                                                       \
    for (;;) {                                                                   \
      auto aiacc_result_ = (expression);                                         \
      if (aiacc_result_ != -1) return aiacc_result_;                             \
      if (errno == EINTR) continue;                                              \
      ::aiacc::detail::throw_syscall_failure(__FILE__, __LINE__, #expression, errno); \
    }                                                                            \
  }())

// Evaluates a libzmq C call (returns -1 on failure). Yields the expression's value.
#define AIACC_ZMQ_CHECK(expression)                                              \
  ([&]() {                                                                       \
    auto aiacc_result_ = (expression);                                           \
    if (aiacc_result_ == -1) [[unlikely]]                                        \
      ::aiacc::detail::throw_zmq_failure(__FILE__, __LINE__, #expression, zmq_errno()); \
    return aiacc_result_;                                                        \
  }())
