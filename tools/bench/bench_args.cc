#include "tools/bench/bench_args.h"

#include <unistd.h>

#include <cmath>

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
  else if (unit == "T" || unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  if (used == 0 || scale == 0) {
    throw ConfigError(fmt::format("{} expects a size such as 4, 64K, 256M or 1T, got '{}'", flag, text));
  }
  const double bytes = value * scale;
  if (bytes < static_cast<double>(min) || bytes > static_cast<double>(max)) {
    throw ConfigError(fmt::format("{} takes {} to {} bytes, got {}", flag, min, max, text));
  }
  if (bytes != std::floor(bytes)) {
    throw ConfigError(fmt::format("{} takes a whole number of bytes, got {} ({} bytes)", flag, text, bytes));
  }
  return static_cast<std::int64_t>(bytes);
}

bool on_off_flag(std::string_view flag, const std::string& text) {
  if (text != "on" && text != "off") throw ConfigError(fmt::format("{} takes on or off, got '{}'", flag, text));
  return text == "on";
}

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size) : 0.0;
}

std::string gib_text(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024 * 1024)); }

void refuse_beyond_memory(std::string_view flags, double bytes, std::string_view parts) {
  const double memory = physical_memory_bytes();
  if (memory > 0 && bytes > memory) {
    throw ConfigError(fmt::format("{} would need at least {:.0f} bytes of memory ({}: {}), more than this machine's "
                                  "{:.0f} bytes ({})", flags, bytes, gib_text(bytes), parts, memory, gib_text(memory)));
  }
}

}  // namespace aiacc::bench
