// zlib's gzFile as an RAII handle, and its error text; shared by the data readers (internal).
#pragma once

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "core/error.h"

namespace aiacc::data::detail {

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

// Checks that `path` is a regular file this process can reach before it is opened: DataError
// "no such file" (with `missing_hint` in brackets), "cannot access" (a directory on the way
// that this user may not enter: "no such file" would be the wrong advice) or "not a regular
// file". Returns its size in bytes (0 when unknown).
inline std::uintmax_t check_data_file(const std::string& path, const std::string& missing_hint = "") {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
    throw DataError(fmt::format("{}: cannot access: {}", path, ec.message()));
  }
  if (!std::filesystem::exists(status)) {
    throw DataError(fmt::format("{}: no such file{}", path, missing_hint.empty() ? "" : " (" + missing_hint + ")"));
  }
  if (!std::filesystem::is_regular_file(status)) throw DataError(fmt::format("{}: not a regular file", path));
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
  return ec ? 0 : bytes;
}

// The last error of `file` as text (errno's text when zlib reports a system error).
inline std::string gz_message(gzFile file) {
  int code = Z_OK;
  const char* text = gzerror(file, &code);
  if (code == Z_ERRNO) return std::strerror(errno);
  return text ? text : "unknown zlib error";
}

}  // namespace aiacc::data::detail
