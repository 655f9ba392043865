// Shards as their own processes (the aiacc-ps-server program, path given as the first test
// argument): they publish their endpoints through files, serve a client like in-process shards
// do, write and restore checkpoints, and exit cleanly on a shutdown request.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/ps/ps_fixture.h"

extern char** environ;

namespace aiacc::ps {
namespace {

std::string server_program() {
  const auto& args = ::testing::internal::GetArgvs();
  return args.size() > 1 ? args[1] : std::string();
}

// A child process we started; killed (and reaped) on destruction if still running. With
// `output`, its stdout and stderr go to that file.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv, const std::string& output = {}) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (!output.empty()) {
      posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&actions, 1, 2);
    }
    if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
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

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A fresh folder for one test, removed on destruction.
struct TempDir {
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
};

constexpr const char* kServing = "serving (incarnation";

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
      children.push_back(std::make_unique<Child>(argv, (dir / ("log-" + std::to_string(round) + "-" + std::to_string(k))).string()));
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
    if (round == 1) {
      // The checkpoint is restored before the shard says it serves (and so before any request).
      for (int k = 0; k < 2; ++k) {
        const std::string log = read_text(dir / ("log-1-" + std::to_string(k)));
        const std::size_t restored = log.find("restored table proc");
        ASSERT_NE(restored, std::string::npos) << log;
        EXPECT_LT(restored, log.find(kServing)) << log;
      }
    }
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

// Runs the program with `args`, returns (exit status, its output).
std::pair<int, std::string> run_program(const std::vector<std::string>& args, const TempDir& dir) {
  std::vector<std::string> argv{server_program()};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto output = dir.path / "output";
  const int status = Child(argv, output.string()).wait_exit(20.0);
  return {status, read_text(output)};
}

// --bind is checked before anything binds: ZeroMQ took port 99999 as 34463 (modulo 65536) and
// served there, and read a malformed address as an interface name ("No such device"), in
// messages that did not name --bind. A failing bind names it too.
TEST(PsProcesses, BindIsCheckedAndNamedInItsErrors) {
  ASSERT_FALSE(server_program().empty()) << "pass the aiacc-ps-server path as the first argument";
  TempDir dir("aiacc_ps_bind");
  for (const std::string bind : {"tcp://127.0.0.1:99999", "garbage", "tcp://999.1.1.1:1", "tcp://127.0.0.1",
                                 "tcp://127.0.0.1:12ab", "inproc://x"}) {
    const auto [status, output] = run_program({"--bind", bind}, dir);
    EXPECT_EQ(status, 2) << bind << ": " << output;
    EXPECT_NE(output.find("--bind " + bind), std::string::npos) << output;
    EXPECT_NE(output.find("tcp://HOST:PORT (PORT 0-65535"), std::string::npos) << output;
    EXPECT_EQ(output.find(kServing), std::string::npos) << output;
  }
  // A well-formed endpoint that cannot be bound: no such interface.
  const auto [status, output] = run_program({"--bind", "tcp://no-such-interface-x:1"}, dir);
  EXPECT_EQ(status, 1) << output;
  EXPECT_NE(output.find("--bind tcp://no-such-interface-x:1: cannot listen there"), std::string::npos) << output;
  EXPECT_EQ(output.find(kServing), std::string::npos) << output;
}

// The shard's inputs are checked, and its checkpoint read, before it says it serves: it used to
// log "serving" and then fail on a missing --load or an endpoint file it could not write. A
// checkpoint folder of another shard count is named, with its shard count.
TEST(PsProcesses, InputsAreCheckedBeforeServing) {
  ASSERT_FALSE(server_program().empty()) << "pass the aiacc-ps-server path as the first argument";
  TempDir dir("aiacc_ps_inputs");
  const auto checkpoint = dir.path / "ckpt";
  std::filesystem::create_directories(checkpoint);
  {
    testing::Cluster cluster(2);
    auto client = cluster.client();
    client->create_table(testing::table_config("inputs", 4, "sgd"));
    const std::vector<std::int64_t> ids{1, 2, 3, 4, 5, 6};
    std::vector<float> rows(ids.size() * 4);
    client->wait(client->pull("inputs", ids, rows.data(), 0));
    client->save_checkpoint(checkpoint.string());
  }
  ASSERT_TRUE(std::filesystem::exists(checkpoint / "ps-shard-00001-of-00002.safetensors"));

  auto expect_refused = [&](const std::vector<std::string>& args, int expected_status,
                            const std::vector<std::string>& phrases) {
    const auto [status, output] = run_program(args, dir);
    EXPECT_EQ(status, expected_status) << output;
    for (const auto& phrase : phrases) EXPECT_NE(output.find(phrase), std::string::npos) << phrase << " in " << output;
    EXPECT_EQ(output.find(kServing), std::string::npos) << output;
  };
  expect_refused({"--num-shards", "3", "--load", checkpoint.string()}, 2,
                 {"--load " + checkpoint.string(), "ps-shard-00000-of-00003.safetensors",
                  "the files of 2 shards (ps-shard-*-of-00002)", "start 2 shards"});
  std::filesystem::remove(checkpoint / "ps-shard-00001-of-00002.safetensors");
  expect_refused({"--shard", "1", "--num-shards", "2", "--load", checkpoint.string()}, 2,
                 {"the files of shard 0 of 2", "shard 1's file is missing"});
  expect_refused({"--load", (dir.path / "nonexistent").string()}, 2, {"--load", "no such checkpoint file or folder"});
  expect_refused({"--endpoint-file", "/proc/nope/x"}, 2, {"--endpoint-file /proc/nope/x", "/proc/nope does not exist"});
  // Shard 0's file of 2, given to a shard 1 of 2: refused before it binds, as a usage error
  // naming --load (it was a runtime failure, status 1, that did not).
  const std::string shard0 = (checkpoint / "ps-shard-00000-of-00002.safetensors").string();
  expect_refused({"--shard", "1", "--num-shards", "2", "--load", shard0}, 2,
                 {"--load " + shard0 + ": the file of shard 0 of 2; this server is shard 1 of 2 (--shard 1 "
                  "--num-shards 2): give it ps-shard-00001-of-00002.safetensors or the checkpoint folder"});
  // Its shard index right but of another shard count: the file's metadata says which.
  std::filesystem::copy_file(shard0, dir.path / "renamed.safetensors");
  expect_refused({"--shard", "0", "--num-shards", "3", "--load", (dir.path / "renamed.safetensors").string()}, 2,
                 {"the file of shard 0 of 2; this server is shard 0 of 3 (--shard 0 --num-shards 3)"});
  // A file that is no shard checkpoint at all: a usage error naming --load too (it was status 1).
  {
    std::ofstream(dir.path / "notes.safetensors") << "not a checkpoint";
  }
  expect_refused({"--load", (dir.path / "notes.safetensors").string()}, 2,
                 {"--load " + (dir.path / "notes.safetensors").string() + ": "});
}

// A capacity far below the rows a job touches evicts at almost every request: each eviction was
// an info line (3321 in a 100-step job). Now each is a debug line, info has the first and then a
// summary at most every minute, and one request holding more rows than the capacity is warned
// about once.
TEST(PsProcesses, EvictionsDoNotFloodTheLog) {
  ASSERT_FALSE(server_program().empty()) << "pass the aiacc-ps-server path as the first argument";
  TempDir dir("aiacc_ps_evict");
  const auto endpoint_file = dir.path / "endpoint";
  const auto output = dir.path / "output";
  Child child({server_program(), "--endpoint-file", endpoint_file.string(), "--log-interval-s", "0"}, output.string());
  ASSERT_TRUE(child.started());
  ClientOptions options;
  options.endpoints = {read_endpoint(endpoint_file, 30.0)};
  ASSERT_FALSE(options.endpoints[0].empty()) << read_text(output);
  options.timeout_s = 30.0;
  PsClient client(options);
  TableConfig config = testing::table_config("evict", 2, "sgd");
  config.options.capacity_rows = 200;
  client.create_table(config);
  constexpr int kSteps = 100;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::int64_t> ids;  // 50 new ids a step: an eviction every step or so
    for (int i = 0; i < 50; ++i) ids.push_back(step * 1000 + i);
    if (step == kSteps / 2) {
      for (int i = 50; i < 300; ++i) ids.push_back(step * 1000 + i);  // one request above the capacity
    }
    std::vector<float> rows(ids.size() * 2);
    client.wait(client.pull("evict", ids, rows.data(), static_cast<std::uint64_t>(step)));
  }
  const std::int64_t evicted = client.stats()[0][0].evicted_rows;
  client.shutdown_servers();
  EXPECT_EQ(child.wait_exit(20.0), 0);
  EXPECT_GT(evicted, 20 * 40) << "the run should evict at most steps";
  std::istringstream lines(read_text(output));
  int info = 0;
  int warnings = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" I ") != std::string::npos && line.find("least recently used") != std::string::npos) ++info;
    if (line.find(" W ") != std::string::npos && line.find("table evict: one request") != std::string::npos) {
      ++warnings;
      EXPECT_NE(line.find("holds 300 rows"), std::string::npos) << line;
      EXPECT_NE(line.find("capacity_rows 200"), std::string::npos) << line;
    }
  }
  // The first eviction and at most one summary (a slow machine's run past a minute).
  EXPECT_LE(info, 2) << read_text(output);
  EXPECT_EQ(warnings, 1) << read_text(output);
}

}  // namespace
}  // namespace aiacc::ps
