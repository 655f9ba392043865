// Helpers shared by the fuzz harnesses (tests/fuzz/*_fuzz.cc): the error policy, a per-process
// scratch directory for parsers that read files, and a cursor over the fuzz input.
//
// Error policy: a parser given hostile bytes may throw the typed errors of core/error.h
// (ConfigError, DataError, IoError, CommError, ...); that is the expected outcome and is
// swallowed. InternalError (a failed AIACC_CHECK: "a bug in aiacc-train, not in the input"),
// any other exception type, a crash, a sanitizer report, a hang or an allocation beyond the
// fuzzer's limit is a finding.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include "core/error.h"
#include "core/log.h"

namespace aiacc::fuzz {

// Thrown by a harness when a property that must hold for every input does not (e.g. a value
// that was read does not survive write + read): a finding, not an input error.
class PropertyViolation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Runs `body`, swallowing the typed errors a parser may raise for bad input. With
// AIACC_FUZZ_VERBOSE set, prints them (to see how far seeds get).
template <class F>
void expect_input_errors(F&& body) {
  try {
    body();
  } catch (const InternalError&) {
    throw;  // an invariant of ours failed: a bug, whatever the input
  } catch (const Error& e) {
    static const bool verbose = std::getenv("AIACC_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "input error: %s\n", e.what());
  }
}

// Silences the library loggers (warnings about bad input are expected in the millions).
inline void quiet_logs() {
  static const bool done = [] {
    log::LogOptions options;
    options.level = "off";
    log::configure(options);
    return true;
  }();
  (void)done;
}

// A directory private to this process, removed at normal exit. Under /dev/shm when available
// (harnesses write and fsync files on every input), else the system temp directory.
// $AIACC_FUZZ_TMPDIR overrides the parent.
class ScratchDir {
 public:
  static const std::filesystem::path& get() {
    static ScratchDir dir;
    return dir.path_;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

 private:
  ScratchDir() {
    std::filesystem::path parent;
    if (const char* env = std::getenv("AIACC_FUZZ_TMPDIR"); env && *env) {
      parent = env;
    } else if (::access("/dev/shm", W_OK) == 0) {
      parent = "/dev/shm";
    } else {
      parent = std::filesystem::temp_directory_path();
    }
    path_ = parent / ("aiacc-fuzz-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  std::filesystem::path path_;
};

inline std::filesystem::path scratch_path(const std::string& name) { return ScratchDir::get() / name; }

// Replaces `path` with `bytes` (std::runtime_error, a finding of the harness itself, on failure).
inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("fuzz harness: cannot write " + path.string());
}

// `bytes` as a gzip stream (what `gzip` writes), for the readers that take .gz files.
inline std::string gzip(std::string_view bytes) {
  z_stream stream{};
  if (deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("fuzz harness: deflateInit2 failed");
  }
  std::string out(deflateBound(&stream, static_cast<uLong>(bytes.size())) + 32, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  if (status != Z_STREAM_END) throw std::runtime_error("fuzz harness: deflate failed");
  return out;
}

// Consumes the fuzz input front to back; reads past the end yield zeros / empty pieces, so a
// harness never needs to check the length itself.
class InputCursor {
 public:
  InputCursor(const std::uint8_t* data, std::size_t size)
      : text_(reinterpret_cast<const char*>(data), size) {}

  std::uint8_t u8() {
    if (text_.empty()) return 0;
    const auto value = static_cast<std::uint8_t>(text_.front());
    text_.remove_prefix(1);
    return value;
  }
  std::uint16_t u16() {  // little-endian
    const std::uint16_t low = u8();
    return static_cast<std::uint16_t>(low | (std::uint16_t{u8()} << 8));
  }
  std::uint32_t u32() {
    const std::uint32_t low = u16();
    return low | (std::uint32_t{u16()} << 16);
  }
  // The next `count` bytes (fewer at the end of the input).
  std::string_view bytes(std::size_t count) {
    const std::string_view piece = text_.substr(0, count);
    text_.remove_prefix(piece.size());
    return piece;
  }
  std::string_view rest() { return bytes(text_.size()); }
  bool empty() const { return text_.empty(); }

 private:
  std::string_view text_;
};

}  // namespace aiacc::fuzz
