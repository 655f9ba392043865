#include "tools/bench/bench_args.h"

#include <fmt/format.h>

#include "core/error.h"
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

}  // namespace aiacc::bench
