// util::cgroup_cpu_limit and usable_cpus: the CPU time a container allows, read from cgroup v2
// and v1 layouts written to a temporary folder, and, as root, from a real cgroup this test makes.
// The limits here are exact in binary (quota / period), so they compare with ==.
#include "core/util/cpus.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "tests/testing/cpu_quota_group.h"

namespace aiacc::util {
namespace {

namespace fs = std::filesystem;

class CgroupLayout : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("aiacc-cpus-test-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  // Writes `text` to root/relative, making its folders.
  void write(const std::string& relative, const std::string& text) {
    const fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  std::string at(const std::string& relative) const { return (root_ / relative).string(); }
  fs::path root_;
};

TEST_F(CgroupLayout, V2ContainerReadsItsOwnCgroupAtTheMountPoint) {
  write("v2/cpu.max", "150000 100000\n");
  const std::string mounts = "40 30 0:37 / " + at("v2") + " rw,relatime - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(cgroup_cpu_limit("0::/\n", mounts), std::optional(1.5));
}

TEST_F(CgroupLayout, V2TakesTheLowestLimitAlongThePathToTheMountPoint) {
  // The pod's limit (2 CPUs) binds a container whose own cpu.max allows 3, and its sibling's
  // "max".
  write("v2/cpu.max", "max 100000\n");
  write("v2/kubepods/cpu.max", "800000 100000\n");
  write("v2/kubepods/pod1/cpu.max", "200000 100000\n");
  write("v2/kubepods/pod1/c1/cpu.max", "300000 100000\n");
  write("v2/kubepods/pod1/c2/cpu.max", "max 100000\n");
  const std::string mounts = "40 30 0:37 / " + at("v2") + " rw - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(cgroup_cpu_limit("0::/kubepods/pod1/c1\n", mounts), std::optional(2.0));
  EXPECT_EQ(cgroup_cpu_limit("0::/kubepods/pod1/c2\n", mounts), std::optional(2.0));
  // Above the mount point nothing is read: a limit there is not this hierarchy's.
  write("cpu.max", "10000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/kubepods/pod1/c1\n", mounts), std::optional(2.0));
}

TEST_F(CgroupLayout, V1ReadsTheCpuControllersHierarchyOnly) {
  // A hybrid host like this one: cpu and cpuacct mounted apart, v2 without the cpu controller.
  write("cpu/job/cpu.cfs_quota_us", "-1\n");
  write("cpu/job/cpu.cfs_period_us", "100000\n");
  write("cpu/cpu.cfs_quota_us", "50000\n");
  write("cpu/cpu.cfs_period_us", "100000\n");
  write("cpuacct/cpu.cfs_quota_us", "10000\n");  // not the cpu controller's: never read
  write("cpuacct/cpu.cfs_period_us", "100000\n");
  const std::string mounts = "31 30 0:28 / " + at("cpu") + " rw,relatime - cgroup cgroup rw,cpu\n" +
                             "32 30 0:29 / " + at("cpuacct") + " rw,relatime - cgroup cgroup rw,cpuacct\n" +
                             "40 30 0:37 / " + at("unified") + " rw,relatime - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(cgroup_cpu_limit("2:cpuacct:/job\n1:cpu:/job\n0::/job\n", mounts), std::optional(0.5));
}

TEST_F(CgroupLayout, V1ContainerWhoseCgroupIsTheMountsRoot) {
  // Docker without a cgroup namespace: /proc/self/cgroup names the host's path, which the
  // container's mount has as its root.
  write("cpu,cpuacct/cpu.cfs_quota_us", "300000\n");
  write("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  const std::string mounts = "31 30 0:28 /docker/abc " + at("cpu,cpuacct") +
                             " rw,nosuid master:12 - cgroup cgroup rw,cpu,cpuacct\n";
  EXPECT_EQ(cgroup_cpu_limit("3:cpu,cpuacct:/docker/abc\n", mounts), std::optional(3.0));
}

TEST_F(CgroupLayout, EscapedMountPointsAndPathsThatClimb) {
  // The mount table writes a space in a mount point as \040.
  write("cg v2/cpu.max", "250000 100000\n");
  write("cg v2/job/cpu.max", "max 100000\n");
  const std::string escaped = at("cg v2").replace(at("cg v2").find(' '), 1, "\\040");
  EXPECT_EQ(cgroup_cpu_limit("0::/job\n", "40 30 0:37 / " + escaped + " rw - cgroup2 cgroup2 rw\n"),
            std::optional(2.5));
  // A cgroup outside the namespace's root ("/../x") is not looked for above the mount point.
  write("outside/cpu.max", "10000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/../outside\n", "40 30 0:37 / " + escaped + " rw - cgroup2 cgroup2 rw\n"),
            std::optional(2.5));
}

TEST_F(CgroupLayout, NoLimitOrUnreadableFilesGiveNone) {
  write("v2/cpu.max", "max 100000\n");
  const std::string mounts = "40 30 0:37 / " + at("v2") + " rw - cgroup2 cgroup2 rw\n";
  EXPECT_FALSE(cgroup_cpu_limit("0::/\n", mounts).has_value());
  write("v2/cpu.max", "lots 100000\n");
  EXPECT_FALSE(cgroup_cpu_limit("0::/\n", mounts).has_value());
  EXPECT_FALSE(cgroup_cpu_limit("", "").has_value());
  EXPECT_FALSE(cgroup_cpu_limit("garbage\n0::\n", "half a line - cgroup2\n").has_value());
  // A cgroup the mount table does not list is not guessed at.
  EXPECT_FALSE(cgroup_cpu_limit("0::/\n", "").has_value());
}

TEST(CpusWithin, ALimitKeepsItsCpusRoundedUpAndAtLeastOneBusy) {
  EXPECT_EQ(cpus_within(1.0), 1u);
  EXPECT_EQ(cpus_within(1.5), 2u);
  EXPECT_EQ(cpus_within(2.0 + 1e-12), 2u);  // quota / period rounding, not a third CPU
  EXPECT_EQ(cpus_within(0.25), 1u);
  EXPECT_EQ(cpus_within(8.0), 8u);
}

// As root: a child process moved into a real cgroup with one CPU's time sees a limit of 1 and
// one usable CPU, however many CPUs its affinity allows.
TEST(UsableCpus, ACgroupQuotaOfOneCpuLeavesOneUsable) {
  const std::size_t allowed = allowed_cpus().size();
  if (!cgroup_cpu_limit().has_value()) {
    EXPECT_EQ(usable_cpus(), allowed);
  }
  aiacc::testing::CpuQuotaGroup group("aiacc-cpus-test", 100000);
  if (!group.why_not().empty()) GTEST_SKIP() << group.why_not();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << "fork failed";
  if (child == 0) {
    std::ofstream(group.procs()) << ::getpid() << "\n";
    const auto limit = cgroup_cpu_limit();
    const bool ok = limit.has_value() && std::fabs(*limit - 1.0) < 1e-12 && usable_cpus() == 1;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child in " << group.procs().string()
                                                             << " did not see a one-CPU limit";
}

}  // namespace
}  // namespace aiacc::util
