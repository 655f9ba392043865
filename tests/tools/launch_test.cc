// The local launcher's restart decision and what aiacc-train prints when every rank would hit
// the same configuration error.
//
// LaunchLocal: launch_local starts this very binary (/proc/self/exe) as its ranks; main() below
// makes such a rank (AIACC_RANK set) append its start to a file and exit as its command line
// says, so the tests script how each rank ends.
// AiaccTrain: the real program (path in argv[1]) with data files that no restart can mend.
#include "tools/trainer/launch.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/process.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string g_program;

constexpr const char* kChildFlag = "--launch-test-rank";

// A rank: argv = {program, kChildFlag, STARTS_FILE, HOW_RANK_0, HOW_RANK_1, ...}; HOW is
// "exit:N" (exit N at once), "at-term:N" (exit N when the launcher's SIGTERM comes, which it
// sends only after it has recorded another rank's failure: an error that follows that failure)
// or "once-armed:N" (exit N once an "at-term" rank waits for that SIGTERM). Each rank first
// appends "rank R attempt A" to STARTS_FILE.
volatile std::sig_atomic_t g_terminated = 0;

int rank_main(int argc, char** argv) {
  const int rank = std::atoi(std::getenv("AIACC_RANK"));
  if (argc < 4 + rank) return 99;
  const char* attempt = std::getenv(aiacc::trainer::kRestartCountVariable);
  const std::string starts = argv[2];
  std::ofstream(starts, std::ios::app) << "rank " << rank << " attempt " << (attempt ? attempt : "?") << "\n";
  const std::string how = argv[3 + rank];
  const int status = std::atoi(how.c_str() + how.find(':') + 1);
  const fs::path armed = starts + ".armed";
  // (Bounded: the launcher SIGKILLs its ranks 10 s after a failure anyway.)
  auto wait_until = [](auto done) {
    for (int i = 0; i < 3000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  if (how.rfind("at-term:", 0) == 0) {
    signal(SIGTERM, [](int) { g_terminated = 1; });
    std::ofstream{armed};
    wait_until([] { return g_terminated != 0; });
  } else if (how.rfind("once-armed:", 0) == 0) {
    wait_until([&] { return fs::exists(armed); });
  }
  return status;
}

struct Launched {
  aiacc::trainer::LaunchResult result;
  // "rank R attempt A", one per process that got that far (one the launcher stopped at once may not)
  std::vector<std::string> starts;
  // The attempts rank `rank` started in.
  std::vector<std::string> attempts_of(int rank) const {
    std::vector<std::string> attempts;
    const std::string prefix = fmt::format("rank {} attempt ", rank);
    for (const auto& s : starts) {
      if (s.rfind(prefix, 0) == 0) attempts.push_back(s.substr(prefix.size()));
    }
    return attempts;
  }
};

Launched launch(int max_restarts, const std::vector<std::string>& how) {
  static int serial = 0;
  const fs::path starts_file =
      fs::temp_directory_path() / fmt::format("aiacc_launch_test_{}_{}.txt", getpid(), serial++);
  fs::remove(starts_file);
  aiacc::trainer::ClusterOptions cluster;
  cluster.workers = static_cast<int>(how.size());
  cluster.max_restarts = max_restarts;
  cluster.security.curve = false;
  std::vector<std::string> argv = {"launch_test", kChildFlag, starts_file.string()};
  argv.insert(argv.end(), how.begin(), how.end());
  Launched launched{aiacc::trainer::launch_local(cluster, argv), {}};
  std::ifstream in(starts_file);
  for (std::string line; std::getline(in, line);) launched.starts.push_back(line);
  fs::remove(starts_file);
  fs::remove(starts_file.string() + ".armed");
  return launched;
}

TEST(LaunchLocal, ARuntimeFailureIsRestartedUpToMaxRestarts) {
  const Launched l = launch(2, {"exit:0", "exit:1"});
  EXPECT_EQ(l.result.exit_status, 1) << l.result.failure;
  EXPECT_THAT(l.attempts_of(1), ::testing::ElementsAre("0", "1", "2"));
}

TEST(LaunchLocal, AConfigurationErrorIsNotRestarted) {
  const Launched l = launch(2, {"exit:2", "exit:2"});
  EXPECT_EQ(l.result.exit_status, 2) << l.result.failure;
  EXPECT_THAT(l.starts, ::testing::Each(::testing::EndsWith(" attempt 0")));
}

// Worker 1 fails first (status 1: say its connection to worker 0 broke); worker 0's own error,
// a configuration error, comes only once the launcher has stopped it for worker 1's failure.
// The job is misconfigured: status 2, not restarted.
TEST(LaunchLocal, AConfigurationErrorAfterAnotherFailureIsNotRestarted) {
  const Launched l = launch(2, {"at-term:2", "once-armed:1"});
  EXPECT_EQ(l.result.exit_status, 2) << l.result.failure;
  EXPECT_THAT(l.starts, ::testing::UnorderedElementsAre("rank 0 attempt 0", "rank 1 attempt 0"));
  EXPECT_THAT(l.result.failure, ::testing::StartsWith("worker 1 (pid "));
  EXPECT_THAT(l.result.failure, HasSubstr("; worker 0 (pid "));
  EXPECT_THAT(l.result.failure, HasSubstr("exited with status 2, a configuration error"));
}

// --- the program ---

struct ProgramRun {
  int status = -1;
  std::string output;
  int lines_with(const std::string& text) const {
    std::istringstream in(output);
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line.find(text) != std::string::npos ? 1 : 0;
    return n;
  }
};

ProgramRun train(const std::string& train_file) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("aiacc_launch_test_{}", getpid());
  fs::create_directories(dir);
  const fs::path config = dir / "job.yaml";
  const fs::path test_file = dir / "test.tsv";
  std::ofstream(test_file) << "1\t1\t2\t3\ta\tb\n0\t4\t5\t6\tc\td\n";
  std::ofstream(config) << fmt::format(R"(job: {{name: launch, run_dir: {0}}}
model: {{type: wide_deep, wide_deep: {{embedding_dim: 4, hidden: [8]}}}}
data:
  batch_size: 2
  train: {{type: criteo_tsv, criteo_tsv: {{train_file: '{1}', num_integer: 3, num_categorical: 2}}}}
  test: {{type: criteo_tsv, criteo_tsv: {{test_file: {2}, num_integer: 3, num_categorical: 2}}}}
train: {{epochs: 1}}
cluster: {{workers: 2, max_restarts: 2}}
)",
                                       dir.string(), train_file, test_file.string());
  const auto r = aiacc::testing::run_command(g_program + " " + config.string() + " 2>&1");
  return {r.status, r.output};
}

// A data file no restart can make readable fails the job once, as a configuration error naming
// the key and the path, before any rank starts (it was a run-time error, status 1: every rank
// printed it and cluster.max_restarts started the job 3 times).
TEST(AiaccTrain, AnUnusableDataFileIsOneConfigErrorAndNoStart) {
  const fs::path empty = fs::temp_directory_path() / fmt::format("aiacc_launch_test_empty_{}.tsv", getpid());
  std::ofstream{empty};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/nope/train.tsv", "no such file"}, {empty.string(), "empty file"}, {"/dev/null", "not a regular file"}};
  for (const auto& [path, problem] : cases) {
    const ProgramRun r = train(path);
    const std::string message = "data.train.criteo_tsv.train_file: " + path + ": " + problem;
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_EQ(r.lines_with("aiacc-train: config error: " + message), 1) << r.output;
    EXPECT_EQ(r.lines_with(path), 1) << r.output;  // nowhere else: not by a rank nor in a log line
    EXPECT_EQ(r.lines_with("started 2 workers"), 0) << r.output;
  }
  fs::remove(empty);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == kChildFlag && std::getenv("AIACC_RANK") != nullptr) {
    return rank_main(argc, argv);
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH/TO/aiacc-train\n", argv[0]);
    return 2;
  }
  g_program = argv[1];
  return RUN_ALL_TESTS();
}
