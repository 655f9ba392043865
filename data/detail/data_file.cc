// DataFile: plain reads or a raw inflate loop over gzip members (RFC 1952), on a file
// descriptor with a 1 MiB input buffer.
#include "data/detail/data_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::data::detail {
namespace {

constexpr std::size_t kInputBytes = std::size_t{1} << 20;
// zlib counts in unsigned int: each inflate call gets at most this much output room.
constexpr std::size_t kMaxStep = std::size_t{1} << 30;

bool gzip_magic(const unsigned char* bytes) { return bytes[0] == 0x1f && bytes[1] == 0x8b; }

}  // namespace

DataFile::DataFile(const std::string& path, const std::string& missing_hint) : path_(path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
    throw DataError(fmt::format("{}: cannot access: {}", path, ec.message()));
  }
  if (!std::filesystem::exists(status)) {
    throw DataError(fmt::format("{}: no such file{}", path, missing_hint.empty() ? "" : " (" + missing_hint + ")"));
  }
  if (!std::filesystem::is_regular_file(status)) throw DataError(fmt::format("{}: not a regular file", path));
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw DataError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  try {
    struct stat info {};
    if (fstat(fd_, &info) == 0) file_bytes_ = static_cast<std::uint64_t>(info.st_size);
    input_.resize(kInputBytes);
    while (input_end_ < 2 && fill()) {
    }
    compressed_ = input_end_ >= 2 && gzip_magic(input_.data());
    if (compressed_) {
      // 16 + window bits: a gzip wrapper, not zlib's.
      if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) {
        throw DataError(fmt::format("{}: cannot start decompressing: {}", path, stream_.msg ? stream_.msg : "zlib"));
      }
      inflating_ = true;
      stream_.next_in = input_.data();
      stream_.avail_in = static_cast<uInt>(input_end_);
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

DataFile::~DataFile() {
  if (inflating_) inflateEnd(&stream_);
  if (fd_ >= 0) ::close(fd_);
}

bool DataFile::fill() {
  if (file_end_) return false;
  // Keep what is still unread at the front.
  const std::size_t keep_from = inflating_ ? static_cast<std::size_t>(stream_.next_in - input_.data()) : input_begin_;
  const std::size_t keep = inflating_ ? stream_.avail_in : input_end_ - input_begin_;
  std::memmove(input_.data(), input_.data() + keep_from, keep);
  input_begin_ = 0;
  input_end_ = keep;
  ssize_t got = 0;
  do {
    got = ::read(fd_, input_.data() + input_end_, input_.size() - input_end_);
  } while (got < 0 && errno == EINTR);
  if (got < 0) throw DataError(fmt::format("{}: cannot read: {}", path_, std::strerror(errno)));
  if (inflating_) {
    stream_.next_in = input_.data();
    stream_.avail_in = static_cast<uInt>(input_end_ + static_cast<std::size_t>(got));
  }
  input_end_ += static_cast<std::size_t>(got);
  offset_ += static_cast<std::uint64_t>(got);
  if (got == 0) file_end_ = true;
  return got > 0;
}

bool DataFile::next_member() {
  while (stream_.avail_in < 2 && fill()) {
  }
  if (stream_.avail_in == 0) return false;
  if (stream_.avail_in >= 2 && gzip_magic(stream_.next_in)) {
    if (inflateReset(&stream_) != Z_OK) throw DataError(fmt::format("{}: cannot restart decompressing", path_));
    return true;
  }
  // Not another member: zero padding is what gzip -d ignores too; anything else is data.
  const std::uint64_t trailing_from = offset_ - stream_.avail_in;
  do {
    const bool zeros = std::all_of(stream_.next_in, stream_.next_in + stream_.avail_in,
                                   [](unsigned char b) { return b == 0; });
    stream_.next_in += stream_.avail_in;
    stream_.avail_in = 0;
    if (!zeros) {
      throw DataError(fmt::format("{}: {} bytes after the gzip data are not another gzip stream (a file appended to "
                                  "a compressed one?); they would be ignored",
                                  path_, file_bytes_ > trailing_from ? file_bytes_ - trailing_from : 0));
    }
  } while (fill());
  return false;
}

std::size_t DataFile::read(char* out, std::size_t size) {
  size = std::min(size, kMaxStep);
  if (size == 0) return 0;
  if (!compressed_) {
    if (input_begin_ < input_end_) {  // what the check for gzip's magic read first
      const std::size_t n = std::min(size, input_end_ - input_begin_);
      std::memcpy(out, input_.data() + input_begin_, n);
      input_begin_ += n;
      return n;
    }
    if (file_end_) return 0;
    ssize_t got = 0;
    do {
      got = ::read(fd_, out, size);
    } while (got < 0 && errno == EINTR);
    if (got < 0) throw DataError(fmt::format("{}: cannot read: {}", path_, std::strerror(errno)));
    if (got == 0) file_end_ = true;
    offset_ += static_cast<std::uint64_t>(got);
    return static_cast<std::size_t>(got);
  }
  if (done_) return 0;
  stream_.next_out = reinterpret_cast<Bytef*>(out);
  stream_.avail_out = static_cast<uInt>(size);
  while (stream_.avail_out > 0) {
    if (stream_.avail_in == 0 && !fill()) {
      throw DataError(fmt::format("{}: corrupt or truncated gzip data: the file ends inside a gzip stream", path_));
    }
    const int code = inflate(&stream_, Z_NO_FLUSH);
    if (code == Z_STREAM_END) {
      if (!next_member()) {
        done_ = true;
        break;
      }
      continue;
    }
    if (code == Z_OK || (code == Z_BUF_ERROR && stream_.avail_in == 0)) continue;
    throw DataError(fmt::format("{}: corrupt or truncated gzip data: {}", path_, stream_.msg ? stream_.msg : zError(code)));
  }
  return size - stream_.avail_out;
}

}  // namespace aiacc::data::detail
