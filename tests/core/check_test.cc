// Check macros turn failures into typed exceptions with the expression, values and location;
// log levels are validated and applied per subsystem.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>

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

// A misspelt subsystem used to be accepted, leaving the one meant at the default level.
TEST(Log, AnUnknownSubsystemIsRefusedWithTheClosestName) {
  EXPECT_EQ(log::check_levels({{"ring", "debug"}, {"ps", "warn"}}), "");
  const std::string problem = log::check_levels({{"rnig", "debug"}});
  EXPECT_THAT(problem, HasSubstr("no subsystem 'rnig' (did you mean 'ring'?)"));
  EXPECT_THAT(log::check_levels({{"ring", "loud"}}), HasSubstr("level of 'ring': expected one of"));
  log::LogOptions options;
  options.levels["my_model"] = "debug";
  EXPECT_THROW(log::configure(options), ConfigError);
  log::register_subsystem("my_model");  // user code declares its own logger's subsystem
  log::configure(options);
  EXPECT_EQ(log::get("my_model")->level(), spdlog::level::debug);
  log::configure(log::LogOptions{});
}

// Every subsystem the sources log under is one log.levels accepts: the list in core/log.cc is
// kept in step with the log::get("...") calls.
TEST(Log, EverySubsystemInTheSourcesIsKnown) {
  const char* root = std::getenv("AIACC_SOURCE_ROOT");
  if (root == nullptr) GTEST_SKIP() << "AIACC_SOURCE_ROOT is not set (run through meson test)";
  const std::vector<std::string> known = log::subsystems();
  const std::regex call(R"re(log::get\("([^"]+)"\))re");
  int calls = 0;
  for (const char* folder : {"core", "ring", "ps", "data", "models", "tools"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(std::filesystem::path(root) / folder)) {
      const auto ext = entry.path().extension();
      if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".cu")) continue;
      std::ifstream in(entry.path());
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (std::sregex_iterator it(text.begin(), text.end(), call), end; it != end; ++it) {
        ++calls;
        EXPECT_NE(std::find(known.begin(), known.end(), (*it)[1].str()), known.end())
            << entry.path() << " logs under '" << (*it)[1] << "', which log.levels does not know";
      }
    }
  }
  EXPECT_GT(calls, 50);
}

}  // namespace
}  // namespace aiacc
