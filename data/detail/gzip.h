// zlib's gzFile as an RAII handle, and its error text; shared by the data readers (internal).
#pragma once

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

namespace aiacc::data::detail {

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

// The last error of `file` as text (errno's text when zlib reports a system error).
inline std::string gz_message(gzFile file) {
  int code = Z_OK;
  const char* text = gzerror(file, &code);
  if (code == Z_ERRNO) return std::strerror(errno);
  return text ? text : "unknown zlib error";
}

}  // namespace aiacc::data::detail
