// Check macros turn failures into typed exceptions with the expression, values and location;
// log levels are validated and applied per subsystem.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zmq.h>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"

namespace aiacc {
namespace {

using ::testing::HasSubstr;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<nothing thrown>";
}

TEST(Check, ComparisonShowsBothValuesAndLocation) {
  int rows = 3, cols = 4;
  std::string m = message_of([&] { AIACC_CHECK_EQ(rows, cols, "matrix {}", "A"); });
  EXPECT_THAT(m, HasSubstr("rows == cols (3 vs 4): matrix A"));
  EXPECT_THAT(m, HasSubstr("check_test.cc:"));
  EXPECT_THROW(AIACC_CHECK(rows > cols), InternalError);
  EXPECT_NO_THROW(AIACC_CHECK_LT(rows, cols));
  EXPECT_NO_THROW(AIACC_CHECK(rows < cols, "never {}", 1));
}

TEST(Check, SyscallFailureNamesCallAndErrno) {
  std::string m = message_of([] { AIACC_SYSCALL(::open("/nonexistent/file", O_RDONLY)); });
  EXPECT_THAT(m, HasSubstr("::open(\"/nonexistent/file\", O_RDONLY) failed"));
  EXPECT_THAT(m, HasSubstr("No such file or directory"));
  int fds[2];
  EXPECT_EQ(AIACC_SYSCALL(::pipe(fds)), 0);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(Check, ZmqFailureIsACommError) {
  void* context = zmq_ctx_new();
  void* socket = zmq_socket(context, ZMQ_REQ);
  EXPECT_THROW(AIACC_ZMQ_CHECK(zmq_connect(socket, "not-a-transport://x")), CommError);
  zmq_close(socket);
  zmq_ctx_term(context);
}

TEST(Log, LevelsPerSubsystem) {
  log::LogOptions options;
  options.level = "warn";
  options.levels["ring"] = "debug";
  log::configure(options);
  EXPECT_EQ(log::get("ring")->level(), spdlog::level::debug);
  EXPECT_EQ(log::get("ps")->level(), spdlog::level::warn);
  options.levels["ps"] = "loud";
  EXPECT_THROW(log::configure(options), ConfigError);
  log::configure(log::LogOptions{});
  EXPECT_EQ(log::get("ring")->level(), spdlog::level::info);
}

}  // namespace
}  // namespace aiacc
