// Parsing of Criteo-format TSV lines into CtrColumns: label (0/1), I integer columns (signed
// decimal or empty), C categorical columns (1-8 hex digits, either case, or empty = missing),
// tab-separated; LF or CRLF line ends. Internal to data/ (used by criteo_tsv).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/detail/ctr_columns.h"

namespace aiacc::data::detail {

// The version of what parsing makes of a line: the columns, transform_integer's values, which
// lines are malformed. Columns cached on disk (ctr_cache.h) carry it: bump it whenever
// parse_criteo_line or transform_integer would make other columns of the same text, so that
// caches of the old output are not read.
constexpr std::uint32_t kCriteoParseVersion = 1;

// Column names, for messages: "label", then the integer and categorical names.
struct CriteoLayout {
  int num_integer = 13;
  int num_categorical = 26;
  std::vector<std::string> integer_names;      // I1..In
  std::vector<std::string> categorical_names;  // C1..Cn or configured
  int columns() const { return 1 + num_integer + num_categorical; }
};

// A line that does not parse; `line` is 0-based within the parsed text.
struct MalformedLine {
  std::int64_t line = 0;
  std::string message;  // "column 3 (I2): bad integer 'x1'"
};

// The result of parsing one piece of text.
struct ParsedLines {
  CtrColumns columns;
  std::int64_t lines = 0;                 // lines consumed (valid and malformed)
  std::int64_t malformed_count = 0;
  std::vector<MalformedLine> malformed;   // the first `max_recorded` of them
};

struct ParseLimits {
  bool stop_at_malformed = false;  // stop after the first malformed line (policy `fail`)
  std::int64_t max_examples = -1;  // stop after this many valid examples (-1: no limit)
  std::size_t max_recorded = 5;    // malformed lines kept with their message
};

// Parses the lines of `text` (the last one may lack its newline) and appends the valid ones to
// `out.columns`, which must have the layout's column counts. Never throws for bad data (see
// `out.malformed`); only std::bad_alloc. Thread-safe for distinct `out`.
void parse_criteo_lines(std::string_view text, const CriteoLayout& layout, const ParseLimits& limits,
                        ParsedLines& out);

// Parses one line without its line end; "" when it is well formed (then the example has been
// appended to `columns`), else the message (and `columns` is unchanged).
std::string parse_criteo_line(std::string_view line, const CriteoLayout& layout, CtrColumns& columns);

}  // namespace aiacc::data::detail
