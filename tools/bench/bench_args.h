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
// A whole byte count with an optional unit K, M, G, T (KiB, MiB, GiB, TiB: powers of 1024), in
// [min, max], e.g. `--max-bytes 256M`, `1.5K`; `0.5` and `1.1K` (not whole bytes) are refused.
std::int64_t bytes_flag(std::string_view flag, const std::string& text, std::int64_t min, std::int64_t max);
// `on` or `off`.
bool on_off_flag(std::string_view flag, const std::string& text);

// Bytes of this machine's memory (0: unknown).
double physical_memory_bytes();
// `bytes` in GiB with one decimal, e.g. "1.5 GiB".
std::string gib_text(double bytes);
// Refuses (ConfigError), before any process starts, sizes that need `bytes` of memory, more than
// this machine has: they would otherwise end in a bare std::bad_alloc or the kernel's OOM killer
// minutes in. `flags` names the flags with their values, `parts` says what the bytes hold.
// Nothing is refused where the machine's memory is unknown.
void refuse_beyond_memory(std::string_view flags, double bytes, std::string_view parts);

}  // namespace aiacc::bench
