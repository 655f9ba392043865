#include "core/util/cpus.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace aiacc::util {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  while (true) {
    const std::size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

std::optional<double> number(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return static_cast<double>(value);
}

// A mount table field as written: the kernel writes a space, tab, newline or backslash as a
// backslash and three octal digits (a space: \040).
std::string unescape_mount_field(std::string_view field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    const auto octal = [&](std::size_t k) { return field[k] >= '0' && field[k] <= '7'; };
    if (field[i] == '\\' && i + 3 < field.size() && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 + (field[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

// One cgroup's own limit in CPUs: v2 "cpu.max" ("max 100000" or "QUOTA PERIOD"), v1
// cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us.
std::optional<double> limit_in(const fs::path& folder, bool v2) {
  if (v2) {
    const std::vector<std::string_view> fields = split(read_text(folder / "cpu.max"), ' ');
    if (fields.size() != 2) return std::nullopt;
    const auto quota = number(fields[0]), period = number(fields[1]);
    if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
    return *quota / *period;
  }
  const auto quota = number(read_text(folder / "cpu.cfs_quota_us"));
  const auto period = number(read_text(folder / "cpu.cfs_period_us"));
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return *quota / *period;
}

// The lowest limit from `folder` up to `top` (the hierarchy's mount point), both included.
std::optional<double> lowest_limit(fs::path folder, const fs::path& top, bool v2) {
  std::optional<double> lowest;
  while (true) {
    if (const auto limit = limit_in(folder, v2); limit && (!lowest || *limit < *lowest)) lowest = limit;
    if (folder == top || !folder.has_relative_path() || folder.parent_path() == folder) return lowest;
    folder = folder.parent_path();
  }
}

}  // namespace

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  return cpus;
}

std::optional<double> cgroup_cpu_limit(std::string_view self_cgroup, std::string_view self_mountinfo) {
  // This process's cgroup in each hierarchy: "0::PATH" for v2, "ID:CONTROLLERS:PATH" for v1.
  std::optional<std::string> v2_path, v1_cpu_path;
  for (std::string_view line : split(self_cgroup, '\n')) {
    const std::size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string_view::npos || second == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, first), controllers = line.substr(first + 1, second - first - 1);
    const std::string path(line.substr(second + 1));
    if (id == "0" && controllers.empty()) v2_path = path;
    for (std::string_view controller : split(controllers, ',')) {
      if (controller == "cpu") v1_cpu_path = path;
    }
  }
  std::optional<double> lowest;
  // Mount table lines: "ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [TAGS] - TYPE SOURCE SUPER_OPTIONS".
  for (std::string_view line : split(self_mountinfo, '\n')) {
    const std::size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    const std::vector<std::string_view> fields = split(line.substr(0, dash), ' ');
    const std::vector<std::string_view> tail = split(line.substr(dash + 3), ' ');
    if (fields.size() < 5 || tail.size() < 3) continue;
    const bool v2 = tail[0] == "cgroup2";
    bool v1_cpu = false;
    if (tail[0] == "cgroup") {
      for (std::string_view option : split(tail[2], ',')) v1_cpu = v1_cpu || option == "cpu";
    }
    const std::optional<std::string>& path = v2 ? v2_path : v1_cpu_path;
    if ((!v2 && !v1_cpu) || !path) continue;
    // The process's cgroup relative to the mount's root; a container that sees its own cgroup
    // as the mount's root has a path outside it, and its limit is at the mount point itself.
    const std::string root = unescape_mount_field(fields[3]);
    const fs::path top{unescape_mount_field(fields[4])};
    fs::path folder = top;
    if (path->compare(0, root.size(), root) == 0 && (root == "/" || path->size() == root.size() || (*path)[root.size()] == '/')) {
      const fs::path below = fs::path(path->substr(root == "/" ? 1 : root.size())).lexically_normal().relative_path();
      // A path that climbs ("..": a cgroup outside this namespace's root) is not followed.
      const bool climbs = !below.empty() && *below.begin() == "..";
      std::error_code error;
      if (!below.empty() && !climbs && fs::is_directory(top / below, error)) folder = top / below;
    }
    if (const auto limit = lowest_limit(folder.lexically_normal(), top.lexically_normal(), v2);
        limit && (!lowest || *limit < *lowest)) {
      lowest = limit;
    }
  }
  return lowest;
}

std::optional<double> cgroup_cpu_limit() {
  return cgroup_cpu_limit(read_text("/proc/self/cgroup"), read_text("/proc/self/mountinfo"));
}

std::size_t cpus_within(double limit) {
  return static_cast<std::size_t>(std::max(1.0, std::ceil(limit - 1e-9)));  // 2.0000000001: 2
}

std::size_t usable_cpus() {
  const std::size_t allowed = allowed_cpus().size();
  const auto limit = cgroup_cpu_limit();
  if (!limit) return allowed;
  return allowed == 0 ? cpus_within(*limit) : std::min(allowed, cpus_within(*limit));
}

}  // namespace aiacc::util
