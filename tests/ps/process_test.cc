// Shards as their own processes (the aiacc-ps-server program, path given as the first test
// argument): they publish their endpoints through files, serve a client like in-process shards
// do, write and restore checkpoints, and exit cleanly on a shutdown request.
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/ps/ps_fixture.h"

extern char** environ;

namespace aiacc::ps {
namespace {

std::string server_program() {
  const auto& args = ::testing::internal::GetArgvs();
  return args.size() > 1 ? args[1] : std::string();
}

// A child process we started; killed (and reaped) on destruction if still running.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], nullptr, nullptr, args.data(), environ) != 0) pid_ = -1;
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Exit status, or -1 if it did not exit within `seconds`.
  int wait_exit(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

std::string read_endpoint(const std::filesystem::path& file, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(file);
    std::string endpoint;
    if (in >> endpoint && !endpoint.empty()) return endpoint;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {};
}

TEST(PsProcesses, ShardsAsProcessesServeCheckpointAndShutDown) {
  const std::string program = server_program();
  ASSERT_FALSE(program.empty()) << "pass the aiacc-ps-server path as the first argument";
  const auto dir = std::filesystem::temp_directory_path() / ("aiacc_ps_proc_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const TableConfig config = testing::table_config("proc", 8, "adagrad");
  auto reference = testing::reference_store(config);
  std::vector<std::int64_t> probe = testing::random_ids(2000, 3000, 9);
  std::vector<float> expected(probe.size() * 8);

  for (int round = 0; round < 2; ++round) {  // round 1 restores round 0's checkpoint
    std::vector<std::unique_ptr<Child>> children;
    ClientOptions options;
    for (int k = 0; k < 2; ++k) {
      const auto file = dir / ("endpoint-" + std::to_string(round) + "-" + std::to_string(k));
      std::vector<std::string> argv{program, "--shard", std::to_string(k), "--num-shards", "2",
                                    "--endpoint-file", file.string()};
      if (round == 1) {
        // Shard 0 is given its file, shard 1 the checkpoint folder (it finds its own file there).
        argv.push_back("--load");
        argv.push_back(k == 0 ? (dir / "ps-shard-00000-of-00002.safetensors").string() : dir.string());
      }
      children.push_back(std::make_unique<Child>(argv));
      ASSERT_TRUE(children.back()->started());
      const std::string endpoint = read_endpoint(file, 30.0);
      ASSERT_FALSE(endpoint.empty()) << "shard " << k << " published no endpoint";
      options.endpoints.push_back(endpoint);
    }
    options.timeout_s = 30.0;
    PsClient client(options);
    client.create_table(config);
    if (round == 0) {
      for (int step = 0; step < 3; ++step) {
        const auto ids = testing::random_ids(1500, 3000, step);
        const auto grads = testing::random_grads(ids.size(), 8, step);
        client.wait(client.push("proc", ids, grads.data(), 0.05, step));
        std::vector<std::int64_t> unique;
        std::vector<float> summed;
        testing::aggregate(ids, grads, 8, unique, summed);
        reference->push(unique, summed.data(), 0.05);
      }
      client.save_checkpoint(dir.string());
    }
    std::vector<float> rows(probe.size() * 8);
    client.wait(client.pull("proc", probe, rows.data(), 3));
    if (round == 0) reference->pull(probe, expected.data());
    EXPECT_EQ(rows, expected) << "round " << round;
    client.shutdown_servers();
    for (auto& child : children) EXPECT_EQ(child->wait_exit(20.0), 0);
  }
  std::filesystem::remove_all(dir);
}

// The command line: --help prints the usage (status 0); a bad value or a shard index outside
// the shard count is refused (status 2) before anything is served.
TEST(PsProcesses, TheCommandLineIsCheckedBeforeServing) {
  const std::string program = server_program();
  ASSERT_FALSE(program.empty()) << "pass the aiacc-ps-server path as the first argument";
  EXPECT_EQ(Child({program, "--help"}).wait_exit(20.0), 0);
  EXPECT_EQ(Child({program, "--shard", "2", "--num-shards", "2"}).wait_exit(20.0), 2);
  EXPECT_EQ(Child({program, "--shard", "x"}).wait_exit(20.0), 2);
  EXPECT_EQ(Child({program, "--bogus"}).wait_exit(20.0), 2);
}

}  // namespace
}  // namespace aiacc::ps
