// Whole-file reads for dataset files, gzip'd or plain (DataFile reads both).
// Internal to data/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aiacc::data::detail {

// Reads all bytes of `path`, decompressing gzip data. Throws DataError naming the path as
// DataFile does (missing, with `missing_hint` appended when not empty; unreachable; not a
// regular file; unreadable; corrupt, truncated or trailed gzip data). Thread-safe.
std::vector<std::uint8_t> read_file_bytes(const std::string& path, const std::string& missing_hint = "");

// `name` when absolute or `directory` is empty, else directory/name.
std::string join_path(const std::string& directory, const std::string& name);

// Big-endian uint32 at `data` (IDX headers).
inline std::uint32_t load_be32(const std::uint8_t* data) {
  return (std::uint32_t{data[0]} << 24) | (std::uint32_t{data[1]} << 16) |
         (std::uint32_t{data[2]} << 8) | std::uint32_t{data[3]};
}

}  // namespace aiacc::data::detail
