// Test helpers for running programs: a shell command's exit status and output, the source tree,
// and a Python interpreter that has given modules (PATH's python3 may be a pyenv build without
// Debian's python3-torch, which lives under /usr/bin/python3).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace aiacc::testing {

struct CommandResult {
  int status = -1;     // exit status; -1 when the command did not exit normally
  std::string output;  // what it wrote to stdout (redirect stderr with 2>&1 to capture it)
};

// Runs `command` through /bin/sh and waits for it.
CommandResult run_command(const std::string& command);

// $AIACC_SOURCE_ROOT (set by meson test), else the current directory.
std::filesystem::path source_root();

// The first of python3 and /usr/bin/python3 that imports every module in `modules`; "" if none.
std::string python_with(const std::vector<std::string>& modules);

}  // namespace aiacc::testing
