#include "tools/bench/bench_args.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/util/flag_values.h"

namespace aiacc::bench {

double positive_flag(std::string_view flag, const std::string& text, double max) {
  const double value = util::number_flag(flag, text);
  if (value <= 0 || value > max) throw ConfigError(fmt::format("{} takes a number above 0 up to {}, got {}", flag, max, text));
  return value;
}

std::int64_t bytes_flag(std::string_view flag, const std::string& text, std::int64_t min, std::int64_t max) {
  std::size_t used = 0;
  const double value = util::leading_number(text, used);
  const std::string unit = used == 0 ? text : text.substr(used);
  double scale = 0;
  if (unit.empty()) scale = 1;
  else if (unit == "K" || unit == "KiB") scale = 1024.0;
  else if (unit == "M" || unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") scale = 1024.0 * 1024 * 1024;
  if (used == 0 || scale == 0) {
    throw ConfigError(fmt::format("{} expects a size such as 4, 64K or 256M, got '{}'", flag, text));
  }
  const double bytes = value * scale;
  if (bytes < static_cast<double>(min) || bytes > static_cast<double>(max)) {
    throw ConfigError(fmt::format("{} takes {} to {} bytes, got {}", flag, min, max, text));
  }
  return static_cast<std::int64_t>(bytes);
}

bool on_off_flag(std::string_view flag, const std::string& text) {
  if (text != "on" && text != "off") throw ConfigError(fmt::format("{} takes on or off, got '{}'", flag, text));
  return text == "on";
}

void check_output_path(std::string_view flag, const std::string& path) {
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

void write_output(const std::string& path, const std::string& text) { io::write_file_atomically(path, text); }

}  // namespace aiacc::bench
