// Whole-file reads through DataFile, which serves Fashion-MNIST's .gz files and the uncompressed
// files users may have alike.
#include "data/detail/file_bytes.h"

#include <algorithm>
#include <filesystem>

#include "data/detail/data_file.h"

namespace aiacc::data::detail {

std::string join_path(const std::string& directory, const std::string& name) {
  if (directory.empty() || (!name.empty() && name.front() == '/')) return name;
  return (std::filesystem::path(directory) / name).string();
}

std::vector<std::uint8_t> read_file_bytes(const std::string& path, const std::string& missing_hint) {
  DataFile file(path, missing_hint);
  // Start from the on-disk size: exact for plain files, a lower bound for gzip.
  std::vector<std::uint8_t> bytes(std::max<std::uint64_t>(file.file_bytes(), 4096));
  std::size_t used = 0;
  for (;;) {
    if (used == bytes.size()) bytes.resize(bytes.size() * 2);
    const std::size_t got = file.read(reinterpret_cast<char*>(bytes.data() + used), bytes.size() - used);
    if (got == 0) break;
    used += got;
  }
  bytes.resize(used);
  return bytes;
}

}  // namespace aiacc::data::detail
