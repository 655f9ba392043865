// A dataset file read in chunks, plain or gzip'd (told apart by gzip's magic bytes), with the
// errors a user can act on. Our own inflate loop rather than zlib's gzread: gzread stops without
// an error at bytes after a gzip member that do not start another one (a plain file appended
// to a compressed one), so their data would be dropped silently. Internal to data/.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace aiacc::data::detail {

class DataFile {
 public:
  // Opens `path`. DataError naming it when it does not exist ("no such file", with
  // `missing_hint` in brackets when not empty), cannot be reached ("cannot access": a directory
  // on the way this user may not enter), is not a regular file, or cannot be opened.
  explicit DataFile(const std::string& path, const std::string& missing_hint = "");
  ~DataFile();
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;

  // Up to `size` bytes of the (decompressed) content into `out`; 0 once it is all read.
  // DataError naming the path for a read error, corrupt gzip data, a gzip stream cut short,
  // or bytes after the gzip data that start no other gzip member (trailing zero bytes, which
  // some tools pad with, are ignored as gzip -d does).
  std::size_t read(char* out, std::size_t size);

  bool compressed() const { return compressed_; }
  // Bytes of the file on disk.
  std::uint64_t file_bytes() const { return file_bytes_; }
  const std::string& path() const { return path_; }

 private:
  // Refills the input buffer from the file; false at its end.
  bool fill();
  // After a gzip member: true when another follows (the stream is reset for it), false at the
  // end of the file; DataError for other bytes.
  bool next_member();

  std::string path_;
  int fd_ = -1;
  std::uint64_t file_bytes_ = 0;
  bool compressed_ = false;
  std::uint64_t offset_ = 0;  // bytes read from the file so far
  bool file_end_ = false;  // the file has no more bytes to read
  bool done_ = false;      // compressed: every member ended
  std::vector<unsigned char> input_;
  std::size_t input_begin_ = 0, input_end_ = 0;  // unread bytes in input_ (plain files)
  z_stream stream_{};
  bool inflating_ = false;  // stream_ is initialised
};

}  // namespace aiacc::data::detail
