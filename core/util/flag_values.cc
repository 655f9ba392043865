#include "core/util/flag_values.h"

#include <cmath>
#include <exception>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::util {

std::int64_t integer_flag(std::string_view flag, const std::string& text, std::int64_t min, std::int64_t max) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw ConfigError(fmt::format("{} expects a whole number, got '{}'", flag, text));
  }
  if (value < min || value > max) {
    throw ConfigError(fmt::format("{} takes {} to {}, got {}", flag, min, max, value));
  }
  return value;
}

double leading_number(const std::string& text, std::size_t& used) {
  used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (!std::isfinite(value)) used = 0;
  return used == 0 ? 0.0 : value;
}

double number_flag(std::string_view flag, const std::string& text) {
  std::size_t used = 0;
  const double value = leading_number(text, used);
  if (used == 0 || used != text.size()) throw ConfigError(fmt::format("{} expects a number, got '{}'", flag, text));
  return value;
}

}  // namespace aiacc::util
