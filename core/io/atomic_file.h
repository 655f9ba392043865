// Atomic file replacement: data is written to a temporary file in the target's directory,
// flushed to disk, then renamed over the target, so readers (and a crash) see either the old
// file or the complete new one, never a torn mix. Also the RAII file descriptor used by core/io.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace aiacc::io {

// Owns one POSIX file descriptor; closes it on destruction (a failure there is logged, never
// thrown). Move-only.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes now and reports a failure (a delayed write error surfaces here on some filesystems)
  // as IoError naming `path`.
  void close(const std::filesystem::path& path);

 private:
  int fd_ = -1;
};

// open(2) with O_CLOEXEC added, retried on EINTR; an invalid descriptor, errno set, when it
// fails (for callers that choose what a failure means: a lock file that cannot be made, say).
FileDescriptor open_retrying(const std::filesystem::path& path, int flags, unsigned mode = 0);

// flock(2) on `fd`, retried on EINTR: true when taken; false, errno set, when not (EWOULDBLOCK:
// another open file holds it, under LOCK_NB).
bool flock_retrying(const FileDescriptor& fd, int operation);

// Opens `path` read-only; IoError naming the path and the errno text when that fails. A missing
// file says "no such file" when its folder exists and names the missing folder otherwise.
FileDescriptor open_for_reading(const std::filesystem::path& path);

// Reads exactly `num_bytes` at `offset` into `out`, retrying short reads and EINTR. IoError on a
// failed read, DataError ("unexpected end of file") when the file ends first.
void read_exact(const FileDescriptor& fd, const std::filesystem::path& path, std::uint64_t offset,
                void* out, std::size_t num_bytes);

// fsync()s a directory so that a rename or unlink inside it is durable. IoError on failure.
void fsync_directory(const std::filesystem::path& directory);

// One atomic replacement of `path`. Usage: construct, write() any number of times, commit().
// Destroying an uncommitted AtomicFile (an exception unwound past it) removes the temporary file
// and leaves any previous file at `path` untouched. Not thread-safe; one writer per target.
//
// What is replaced: a symbolic link at `path` is followed (through chains of links), and the
// file it points to is replaced; the link stays a link, and a dangling link creates its target.
// An existing FIFO or character device (a named pipe, /dev/null, /dev/stdout) is never replaced:
// it is opened and written directly, at the first write() or at commit() (so a FIFO blocks there
// until it has a reader), with no atomicity; a reader that goes away is an IoError, not SIGPIPE.
// A socket or block device is refused (IoError) rather than replaced or overwritten.
//
// Errors (IoError, message naming the target, the temp file and the errno text, with a hint for
// ENOSPC, EACCES/EPERM and EROFS): the directory does not exist or is not writable, the target is
// a directory, the disk is full, ... In every case the previous file survives and no temporary
// file is left behind.
class AtomicFile {
 public:
  // Creates the temporary file "<dir>/.<name>.tmp-XXXXXX" (mode 0644 before umask) in the folder
  // of the file that will be replaced (the link's target when `path` is a symbolic link).
  explicit AtomicFile(std::filesystem::path path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends `num_bytes` bytes (all of them: short writes and EINTR are retried).
  void write(const void* data, std::size_t num_bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }

  // fsync()s the data, renames the temporary file over the target and fsync()s the directory.
  // After it returns the new contents are durable. Calling write() afterwards is a bug.
  void commit();

  std::uint64_t bytes_written() const { return bytes_written_; }
  // zlib-compatible CRC-32 of the bytes written so far, so callers can record a checksum
  // without reading the file back.
  std::uint32_t crc32() const { return crc32_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  [[noreturn]] void fail(const char* operation, int error_number);
  void open_direct();
  std::string describe() const;

  std::filesystem::path path_;
  // The file written: path_ with symbolic links followed.
  std::filesystem::path target_;
  // Empty when writing directly to a FIFO or device (direct_).
  std::filesystem::path temp_path_;
  bool direct_ = false;
  FileDescriptor fd_;
  std::uint64_t bytes_written_ = 0;
  std::uint32_t crc32_ = 0;
  bool committed_ = false;
};

// Convenience: atomically replaces `path` with `contents`. Returns the CRC-32 of `contents`.
std::uint32_t write_file_atomically(const std::filesystem::path& path, std::string_view contents);

}  // namespace aiacc::io
