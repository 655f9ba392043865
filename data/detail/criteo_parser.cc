// The Criteo TSV line parser: std::from_chars on the raw bytes, no copies or allocations per
// line, so a core parses well over 100 MB/s.
#include "data/detail/criteo_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace aiacc::data::detail {
namespace {

// Field text as shown in messages: quoted, cut to a readable length.
std::string shown(const char* begin, const char* end) {
  constexpr std::ptrdiff_t kMaxShown = 24;
  std::string text(begin, std::min(end, begin + kMaxShown));
  if (end - begin > kMaxShown) text += "...";
  return "'" + text + "'";
}

const char* field_end(const char* p, const char* end) {
  while (p != end && *p != '\t') ++p;
  return p;
}

}  // namespace

std::string parse_criteo_line(std::string_view line, const CriteoLayout& layout, CtrColumns& columns) {
  const char* p = line.data();
  const char* const end = p + line.size();
  // The column count first: a header line or a line cut short is then reported as such rather
  // than as a bad value in whichever column happens to misalign.
  const auto tabs = std::count(p, end, '\t');
  if (tabs != layout.columns() - 1) {
    return fmt::format("expected {} tab-separated columns (label, {} integer, {} categorical), found {}",
                       layout.columns(), layout.num_integer, layout.num_categorical,
                       line.empty() ? std::string("an empty line (a blank line, e.g. at the end of the file: remove "
                                                  "it, or set malformed: skip)")
                                    : std::to_string(tabs + 1));
  }

  const char* stop = field_end(p, end);
  if (stop - p != 1 || (*p != '0' && *p != '1')) {
    return fmt::format("column 1 (label): expected 0 or 1, got {}", shown(p, stop));
  }
  const auto label = static_cast<std::uint8_t>(*p - '0');
  p = stop + 1;

  const auto ni = static_cast<std::size_t>(layout.num_integer);
  const auto nc = static_cast<std::size_t>(layout.num_categorical);
  const std::size_t integers_before = columns.integers.size();
  const std::size_t categoricals_before = columns.categoricals.size();
  const std::size_t missing_before = columns.missing.size();
  columns.integers.resize(integers_before + ni);
  columns.categoricals.resize(categoricals_before + nc);
  columns.missing.resize(missing_before + columns.missing_stride(), 0);
  float* integers = columns.integers.data() + integers_before;
  std::uint32_t* categoricals = columns.categoricals.data() + categoricals_before;
  std::uint8_t* missing = columns.missing.data() + missing_before;
  auto undo = [&](std::string message) {
    columns.integers.resize(integers_before);
    columns.categoricals.resize(categoricals_before);
    columns.missing.resize(missing_before);
    return message;
  };

  for (std::size_t i = 0; i < ni; ++i) {
    stop = field_end(p, end);
    std::int64_t value = 0;
    if (stop != p) {
      auto [ptr, ec] = std::from_chars(p, stop, value);
      if (ec != std::errc() || ptr != stop) {
        return undo(fmt::format("column {} ({}): {} {}", 2 + i, layout.integer_names[i],
                                ec == std::errc::result_out_of_range ? "integer out of range" : "bad integer",
                                shown(p, stop)));
      }
    }
    integers[i] = transform_integer(value);  // empty: 0, as for a count of 0
    p = stop + 1;
  }

  for (std::size_t c = 0; c < nc; ++c) {
    stop = field_end(p, end);
    std::uint32_t value = 0;
    if (stop == p) {
      missing[c / 8] = static_cast<std::uint8_t>(missing[c / 8] | (1u << (c % 8)));
    } else {
      // At most 8 hex digits, so every value fits 32 bits; from_chars takes either case and,
      // for an unsigned type, no sign.
      auto [ptr, ec] = std::from_chars(p, stop, value, 16);
      if (stop - p > 8 || ec != std::errc() || ptr != stop) {
        return undo(fmt::format("column {} ({}): bad categorical value {}, expected up to 8 hex digits",
                                2 + ni + c, layout.categorical_names[c], shown(p, stop)));
      }
    }
    categoricals[c] = value;
    p = stop + 1;
  }
  columns.labels.push_back(label);
  return {};
}

void parse_criteo_lines(std::string_view text, const CriteoLayout& layout, const ParseLimits& limits,
                        ParsedLines& out) {
  const char* p = text.data();
  const char* const end = p + text.size();
  const std::int64_t start_examples = out.columns.size();
  while (p != end) {
    if (limits.max_examples >= 0 && out.columns.size() - start_examples >= limits.max_examples) return;
    const auto* newline = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
    const char* line_end = newline ? newline : end;
    const char* next = newline ? newline + 1 : end;
    if (line_end != p && line_end[-1] == '\r') --line_end;  // CRLF
    std::string message = parse_criteo_line(std::string_view(p, static_cast<std::size_t>(line_end - p)),
                                            layout, out.columns);
    const std::int64_t line = out.lines++;
    p = next;
    if (!message.empty()) {
      ++out.malformed_count;
      if (out.malformed.size() < limits.max_recorded) out.malformed.push_back({line, std::move(message)});
      if (limits.stop_at_malformed) return;
    }
  }
}

}  // namespace aiacc::data::detail
