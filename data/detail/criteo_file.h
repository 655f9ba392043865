// Loading a whole Criteo-format TSV file (plain or gzip'd) into CtrColumns: large chunked reads,
// lines parsed in parallel (OpenMP) within each chunk, malformed lines counted and either
// skipped or reported. Internal to data/ (used by criteo_tsv).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/detail/criteo_parser.h"

namespace aiacc::data::detail {

struct CriteoReadOptions {
  bool skip_malformed = false;  // false: the first malformed line throws
  std::int64_t limit = 0;       // keep the first `limit` valid examples (0: all)
  // Bytes read per chunk; lines longer than a chunk grow it. 8 MiB: big enough to amortise the
  // read calls and to give each of 16 threads half a megabyte of lines, small enough that the
  // buffer and the parsed pieces stay warm in cache (measured on the flights file: 64 MiB chunks
  // cost 35% more CPU, mostly page faults). Tests set a few bytes to reach the boundary paths.
  std::size_t chunk_bytes = std::size_t{8} << 20;
  int threads = 0;  // parse threads (0: OpenMP's default)
};

// What loading found, for the load log line.
struct CriteoLoadReport {
  std::int64_t lines = 0;      // lines read (valid and malformed)
  std::int64_t malformed = 0;  // malformed lines (skipped)
  std::vector<std::int64_t> malformed_lines;  // the first few, 1-based
  std::string first_malformed;                // message of the first one
  std::uint64_t bytes = 0;     // uncompressed bytes read
  double seconds = 0;
  int threads = 1;
};

// Reads `path` whole (the first `limit` examples with a limit). Throws DataError naming the file:
// missing, not a regular file, unreadable, corrupt gzip, empty, no valid line; and, unless
// skip_malformed, "path:line: column k (name): problem" for the first malformed line.
// Blocking; thread-safe (no shared state; uses an OpenMP team).
CtrColumns read_criteo_file(const std::string& path, const CriteoLayout& layout,
                            const CriteoReadOptions& options, CriteoLoadReport& report);

}  // namespace aiacc::data::detail
