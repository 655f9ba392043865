#include "tests/testing/process.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>

namespace aiacc::testing {

CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer{};
  while (std::size_t got = std::fread(buffer.data(), 1, buffer.size(), pipe)) {
    result.output.append(buffer.data(), got);
  }
  const int raw = pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return result;
}

std::filesystem::path source_root() {
  const char* root = std::getenv("AIACC_SOURCE_ROOT");
  return root ? root : ".";
}

std::string python_with(const std::vector<std::string>& modules) {
  std::string imports;
  for (const auto& module : modules) imports += (imports.empty() ? "import " : ", ") + module;
  for (const char* candidate : {"python3", "/usr/bin/python3"}) {
    if (run_command(std::string(candidate) + " -c '" + imports + "' >/dev/null 2>&1").status == 0) {
      return candidate;
    }
  }
  return {};
}

}  // namespace aiacc::testing
