// Command-line pieces every benchmark program shares (aiacc-bench and aiacc-bench-net): --help,
// comma-separated lists, and --json files checked before a sweep of many minutes and written
// atomically after it. Header-only, as aiacc-bench-net links core alone; the number readers
// aiacc-bench adds on top are in bench_args.h.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/io/atomic_file.h"

namespace aiacc::bench {

// `--help` or `-h`: print the usage text and exit 0.
inline bool is_help_flag(std::string_view key) { return key == "--help" || key == "-h"; }

// The items of a comma-separated list such as `--dims 8,16`: at least one, none empty (`,`,
// `8,,16` and `` are refused naming the flag; `example` shows a good value).
inline std::vector<std::string> list_flag(std::string_view flag, const std::string& text, std::string_view example) {
  std::vector<std::string> items;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = text.find(',', begin);
    items.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (items.back().empty()) {
      throw ConfigError(fmt::format("{} takes a comma-separated list such as {}, got '{}'", flag, example, text));
    }
    if (end == std::string::npos) return items;
    begin = end + 1;
  }
}

// Refuses, before any measuring, an output file that could not be written at the end: its
// folder missing or not writable, or the path a folder.
inline void check_output_path(std::string_view flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_directory(path, error)) throw ConfigError(fmt::format("{} {}: is a folder, not a file", flag, path));
  const fs::path folder = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  if (!fs::is_directory(folder, error)) {
    throw ConfigError(fmt::format("{} {}: the folder {} does not exist", flag, path, folder.string()));
  }
  if (::access(folder.c_str(), W_OK) != 0) {
    throw ConfigError(fmt::format("{} {}: cannot write in {}: {}", flag, path, folder.string(), std::strerror(errno)));
  }
}

// Replaces `path` with `text` atomically; IoError naming the path when that fails.
inline void write_output(const std::string& path, const std::string& text) { io::write_file_atomically(path, text); }

}  // namespace aiacc::bench
