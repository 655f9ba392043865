// Whole-file reads through zlib: gzread passes plain files through unchanged, so one path
// serves Fashion-MNIST's .gz files and the uncompressed files users may have.
#include "data/detail/file_bytes.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "data/detail/gzip.h"

namespace aiacc::data::detail {

std::string join_path(const std::string& directory, const std::string& name) {
  if (directory.empty() || (!name.empty() && name.front() == '/')) return name;
  return (std::filesystem::path(directory) / name).string();
}

std::vector<std::uint8_t> read_file_bytes(const std::string& path, const std::string& missing_hint) {
  const std::uintmax_t file_bytes = check_data_file(path, missing_hint);
  GzHandle file(gzopen(path.c_str(), "rb"));
  if (!file) throw DataError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  gzbuffer(file.get(), 1 << 18);

  // Start from the on-disk size: exact for plain files, a lower bound for gzip.
  std::vector<std::uint8_t> bytes;
  std::size_t used = 0;
  bytes.resize(std::max<std::uintmax_t>(file_bytes, 4096));
  for (;;) {
    if (used == bytes.size()) bytes.resize(bytes.size() * 2);
    // gzread takes an unsigned count but returns int: cap each call well below INT_MAX.
    unsigned want = static_cast<unsigned>(std::min<std::size_t>(bytes.size() - used, 1u << 30));
    int got = gzread(file.get(), bytes.data() + used, want);
    if (got < 0) throw DataError(fmt::format("{}: cannot read: {}", path, gz_message(file.get())));
    if (got == 0) break;
    used += static_cast<std::size_t>(got);
  }
  // A gzip stream cut short reads as end-of-file with Z_BUF_ERROR set.
  int code = Z_OK;
  gzerror(file.get(), &code);
  if (code != Z_OK) {
    throw DataError(fmt::format("{}: corrupt or truncated gzip data: {}", path, gz_message(file.get())));
  }
  bytes.resize(used);
  return bytes;
}

}  // namespace aiacc::data::detail
