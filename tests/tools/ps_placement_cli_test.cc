// aiacc-train (path in argv[1]) with tables placed on parameter servers a job does not have
// (cluster.servers: 0): one configuration error, before any rank starts or a dry run prints its
// plan. Each rank used to find it on its own after building its model, and a dry run after
// printing the configuration and part of the plan.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/testing/process.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string g_program;

// A 2-worker Wide&Deep job (tables deep.C1-4, wide.C1-4) without servers, in /tmp/aiacc_ps_placement_<pid>.
std::string job_file() {
  const auto folder = std::filesystem::temp_directory_path() / ("aiacc_ps_placement_" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  const auto file = folder / "job.yaml";
  std::ofstream(file) << "job: {name: ps_placement, run_dir: " << (folder / "runs").string() << "}\n"
                         "model: {type: wide_deep, wide_deep: {embedding_dim: 4, hidden: [8]}}\n"
                         "data:\n  batch_size: 64\n"
                         "  train: {type: synthetic_ctr, synthetic_ctr: {size: 512, num_categorical: 4, num_integer: 2}}\n"
                         "  test: {type: synthetic_ctr, synthetic_ctr: {size: 128, num_categorical: 4, num_integer: 2}}\n"
                         "train: {epochs: 1}\n"
                         "cluster: {workers: 2, servers: 0}\n";
  return file.string();
}

aiacc::testing::CommandResult run(const std::string& arguments) {
  return aiacc::testing::run_command(g_program + " " + job_file() + " " + arguments + " 2>&1");
}

std::size_t count(const std::string& text, const std::string& phrase) {
  std::size_t n = 0;
  for (std::size_t at = text.find(phrase); at != std::string::npos; at = text.find(phrase, at + 1)) ++n;
  return n;
}

constexpr const char* kDeepOnPs =
    "cluster.placement[0]: {match: 'deep.*', place: ps} puts tables on the parameter servers, but cluster.servers "
    "is 0 (the job starts none); set cluster.servers to 1 or more, or place them on the ring (place: ring)";

TEST(PsPlacementCli, ARunRefusesTablesOnServersItHasNoneOfBeforeAnyRankStarts) {
  const auto o = run("--set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_EQ(count(o.output, kDeepOnPs), 1u) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("started 2 workers"))) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("[worker "))) << o.output;
}

TEST(PsPlacementCli, ADryRunRefusesThemBeforeItsPlan) {
  auto o = run("--dry-run --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_EQ(count(o.output, kDeepOnPs), 1u) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("# plan"))) << o.output;
  // Nor is a cluster job emitted whose every rank would refuse it.
  o = run("--emit slurm --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_EQ(count(o.output, kDeepOnPs), 1u) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("#SBATCH"))) << o.output;
  // Every table, by a later rule: the first rule that places on ps is named.
  o = run("--dry-run --set 'cluster.placement=[{match: \"wide.C1\", place: ring}, {match: \"*\", place: ps}]'");
  EXPECT_EQ(o.status, 2) << o.output;
  EXPECT_THAT(o.output, HasSubstr("config error: cluster.placement[1]: {match: '*', place: ps} puts tables on the "
                                  "parameter servers, but cluster.servers is 0"));
}

// What stays as it was: auto places every table on the ring without servers (it never picks ps),
// ring rules need none, one process uses no rules, and with a server the ps rule plans.
TEST(PsPlacementCli, AutoAndRingRulesNeedNoServers) {
  auto o = run("--dry-run");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_EQ(count(o.output, "ring: replicated (no servers)"), 8u) << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("ps (placement rule)"))) << o.output;
  o = run("--dry-run --set 'cluster.placement=[{match: \"deep.*\", place: ring}]'");
  EXPECT_EQ(o.status, 0) << o.output;
  o = run("--dry-run --set cluster.workers=1 --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 0) << o.output;
  o = run("--dry-run --set cluster.servers=1 --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 0) << o.output;
  EXPECT_EQ(count(o.output, "ps (placement rule)"), 4u) << o.output;
  o = run("--emit slurm --set cluster.servers=1 --set 'cluster.placement=[{match: \"deep.*\", place: ps}]'");
  EXPECT_EQ(o.status, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("#SBATCH")) << o.output;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH/TO/aiacc-train\n", argv[0]);
    return 2;
  }
  g_program = argv[1];
  const int status = RUN_ALL_TESTS();
  std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                              ("aiacc_ps_placement_" + std::to_string(::getpid())));
  return status;
}
