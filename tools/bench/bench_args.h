// Command-line values of the benchmarks (aiacc-bench allreduce | ps | train): each parsed whole
// and range-checked, with a ConfigError naming the flag (std::stoi alone reads "0.5" as 0 and
// reports a bad one as "stoi"). --help, lists and --json files: bench_cli.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/util/flag_values.h"
#include "tools/bench/bench_cli.h"

namespace aiacc::bench {

// A whole number in [min, max], e.g. `--ranks 4`.
using util::integer_flag;
// A finite number in (0, max], e.g. `--seconds 0.3`.
double positive_flag(std::string_view flag, const std::string& text, double max);
// A byte count with an optional unit K, M, G (KiB, MiB, GiB: powers of 1024), in [min, max].
std::int64_t bytes_flag(std::string_view flag, const std::string& text, std::int64_t min, std::int64_t max);
// `on` or `off`.
bool on_off_flag(std::string_view flag, const std::string& text);

}  // namespace aiacc::bench
