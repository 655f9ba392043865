// Values of command-line flags (aiacc-bench, aiacc-ps-server): read whole, with a ConfigError
// that names the flag. std::stoi alone reads "0.5" as 0, "12abc" as 12, and reports a bad value
// as "stoi".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace aiacc::util {

// A whole number in [min, max], e.g. `--ranks 4`.
std::int64_t integer_flag(std::string_view flag, const std::string& text, std::int64_t min, std::int64_t max);

// A finite number, the whole of `text`, e.g. `--seconds 0.3` (the caller checks its range).
double number_flag(std::string_view flag, const std::string& text);

// The finite number `text` starts with, and how many characters it took (0: none), for values
// with a unit after the number (`64K`).
double leading_number(const std::string& text, std::size_t& used);

}  // namespace aiacc::util
