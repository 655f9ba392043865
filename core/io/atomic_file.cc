// AtomicFile and FileDescriptor: temp file + fsync + rename + directory fsync, with errors that
// name the file and say what to do about the common causes.
#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <csignal>
#include <ctime>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"

namespace aiacc::io {

namespace {

// What the user can do about the usual causes of a failed write.
const char* errno_hint(int error_number) {
  switch (error_number) {
    case ENOSPC: return "; the disk is full: free space or choose another directory";
    case EDQUOT: return "; the disk quota is exhausted";
    case EACCES:
    case EPERM: return "; permission denied: check the directory's owner and mode";
    case EROFS: return "; the filesystem is mounted read-only";
    case ENOENT: return "; the directory does not exist";
    case ENOTDIR: return "; a component of the path is not a directory";
    case EISDIR: return "; the target is a directory";
    case EFBIG: return "; the file exceeds the size limit (ulimit -f)";
    default: return "";
  }
}

std::string errno_text(int error_number) {
  return fmt::format("{} (errno {}){}", std::strerror(error_number), error_number,
                     errno_hint(error_number));
}

bool is_a_folder(const std::filesystem::path& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// What the user can do about the usual causes of a failed open for reading. A missing file is
// told apart from a missing folder, which is named (the outermost one that is missing).
std::string read_errno_text(const std::filesystem::path& path, int error_number) {
  std::string hint;
  switch (error_number) {
    case ENOENT: {
      std::filesystem::path folder = path.parent_path();
      if (folder.empty() || is_a_folder(folder)) {
        hint = fmt::format("; no such file in {}",
                           folder.empty() ? std::string("the current folder") : folder.string());
        break;
      }
      while (folder.has_relative_path() && !folder.parent_path().empty() &&
             folder.parent_path() != folder && !is_a_folder(folder.parent_path())) {
        folder = folder.parent_path();
      }
      hint = fmt::format("; the folder {} does not exist", folder.string());
      break;
    }
    case EACCES:
    case EPERM: hint = "; permission denied: check the file's and its folders' owner and mode"; break;
    case ENOTDIR: hint = "; a component of the path is not a directory"; break;
    case ELOOP: hint = "; too many levels of symbolic links"; break;
    default: break;
  }
  return fmt::format("{} (errno {}){}", std::strerror(error_number), error_number, hint);
}

// The file a write to `path` affects: the final component is followed through symbolic links
// (relative ones resolve against the link's folder; the kernel resolves links among the folders
// on the way). `info` receives lstat's answer for it; `exists` is false when nothing is there (or
// it cannot be looked at: creating the temporary file then reports why).
std::filesystem::path resolve_links(const std::filesystem::path& path, struct stat& info,
                                    bool& exists) {
  std::filesystem::path current = path;
  for (int hops = 0; hops < 40; ++hops) {
    if (::lstat(current.c_str(), &info) != 0) {
      exists = false;
      return current;
    }
    if (!S_ISLNK(info.st_mode)) {
      exists = true;
      return current;
    }
    std::string target(static_cast<std::size_t>(info.st_size) + 256, '\0');
    ssize_t length = ::readlink(current.c_str(), target.data(), target.size());
    if (length < 0) {
      int error_number = errno;
      throw IoError(fmt::format("cannot write {}: cannot read the symbolic link {}: {}",
                                path.string(), current.string(), std::strerror(error_number)));
    }
    target.resize(static_cast<std::size_t>(length));
    std::filesystem::path next(target);
    current = next.is_absolute() ? next : current.parent_path() / next;
  }
  throw IoError(fmt::format("cannot write {}: more than 40 symbolic links in a row (a loop?)",
                            path.string()));
}

// Writing to a FIFO whose reader has gone raises SIGPIPE, which kills the process by default.
// Blocks it on this thread for the scope and discards one the scope raised, so write() reports
// EPIPE instead.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &saved_);
    sigset_t pending;
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeGuard() {
    sigset_t pending;
    if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_;
  sigset_t saved_;
  bool was_pending_ = false;
};

// Like AIACC_SYSCALL (retries EINTR), but hands the errno back instead of throwing, because the
// error message here must name the file and carry a hint chosen from the errno.
template <class F>
auto retry_eintr(F&& call) {
  for (;;) {
    auto result = call();
    if (result != -1 || errno != EINTR) return result;
  }
}

// The first call to a spdlog logger allocates; destructors must not throw, so guard it.
void log_warning(const std::string& message) noexcept {
  try {
    log::get("io")->warn("{}", message);
  } catch (...) {
  }
}

std::string random_suffix() {
  static thread_local std::mt19937_64 engine{std::random_device{}() ^
                                             static_cast<std::uint64_t>(::getpid())};
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string suffix(8, 'x');
  for (char& c : suffix) c = kAlphabet[engine() % (sizeof kAlphabet - 1)];
  return suffix;
}

}  // namespace

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0 && ::close(fd_) != 0 && errno != EINTR) {
    log_warning(fmt::format("close(fd {}) failed: {}", fd_, std::strerror(errno)));
  }
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    FileDescriptor old(fd_);  // closes the current descriptor
    fd_ = other.release();
  }
  return *this;
}

void FileDescriptor::close(const std::filesystem::path& path) {
  int fd = release();
  // No EINTR retry: on Linux the descriptor is gone even when close() reports EINTR.
  if (fd >= 0 && ::close(fd) != 0 && errno != EINTR) {
    int error_number = errno;
    throw IoError(fmt::format("cannot close {}: {}", path.string(), errno_text(error_number)));
  }
}

FileDescriptor open_retrying(const std::filesystem::path& path, int flags, unsigned mode) {
  return FileDescriptor(
      retry_eintr([&] { return ::open(path.c_str(), flags | O_CLOEXEC, static_cast<mode_t>(mode)); }));
}

bool flock_retrying(const FileDescriptor& fd, int operation) {
  return retry_eintr([&] { return ::flock(fd.get(), operation); }) == 0;
}

FileDescriptor open_for_reading(const std::filesystem::path& path) {
  int fd = retry_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); });
  if (fd < 0) {
    int error_number = errno;
    throw IoError(
        fmt::format("cannot open {}: {}", path.string(), read_errno_text(path, error_number)));
  }
  return FileDescriptor(fd);
}

void read_exact(const FileDescriptor& fd, const std::filesystem::path& path, std::uint64_t offset,
                void* out, std::size_t num_bytes) {
  auto* cursor = static_cast<char*>(out);
  while (num_bytes > 0) {
    // Linux transfers at most ~2 GiB per call; chunk so huge tensors need no special case.
    std::size_t chunk = std::min<std::size_t>(num_bytes, std::size_t{1} << 30);
    ssize_t got =
        retry_eintr([&] { return ::pread(fd.get(), cursor, chunk, static_cast<off_t>(offset)); });
    if (got < 0) {
      int error_number = errno;
      throw IoError(fmt::format("cannot read {} at offset {}: {}", path.string(), offset,
                                errno_text(error_number)));
    }
    if (got == 0) {
      throw DataError(
          fmt::format("{}: unexpected end of file at offset {} ({} more bytes expected)",
                      path.string(), offset, num_bytes));
    }
    cursor += got;
    offset += static_cast<std::uint64_t>(got);
    num_bytes -= static_cast<std::size_t>(got);
  }
}

void fsync_directory(const std::filesystem::path& directory) {
  int fd =
      retry_eintr([&] { return ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
  if (fd < 0) {
    int error_number = errno;
    throw IoError(fmt::format("cannot open directory {} to sync it: {}", directory.string(),
                              errno_text(error_number)));
  }
  FileDescriptor owned(fd);
  // Some filesystems (certain FUSE and network mounts) cannot fsync a directory and say EINVAL;
  // the rename has still happened, so that is not worth failing a checkpoint for.
  if (retry_eintr([&] { return ::fsync(fd); }) != 0 && errno != EINVAL) {
    int error_number = errno;
    throw IoError(
        fmt::format("cannot sync directory {}: {}", directory.string(), errno_text(error_number)));
  }
}

AtomicFile::AtomicFile(std::filesystem::path path) : path_(std::move(path)) {
  if (path_.filename().empty()) {
    throw IoError(fmt::format("cannot write '{}': the path names no file", path_.string()));
  }
  struct stat info {};
  bool exists = false;
  target_ = resolve_links(path_, info, exists);
  if (exists && (S_ISFIFO(info.st_mode) || S_ISCHR(info.st_mode))) {
    // Renaming over a FIFO or device would replace the node with a regular file. Written
    // directly instead, opened at the first write (a FIFO's open blocks until a reader comes, and
    // trace::start probes with an AtomicFile it never writes); access() reports early what
    // that open would refuse.
    direct_ = true;
    if (::access(target_.c_str(), W_OK) != 0) {
      int error_number = errno;
      throw IoError(fmt::format("cannot write {}: {}", describe(), errno_text(error_number)));
    }
    return;
  }
  if (exists && (S_ISSOCK(info.st_mode) || S_ISBLK(info.st_mode))) {
    throw IoError(fmt::format("cannot write {}: it is a {}, not a file; give a regular file, a FIFO "
                              "or a character device",
                              describe(), S_ISSOCK(info.st_mode) ? "socket" : "block device"));
  }
  std::filesystem::path directory = target_.parent_path();
  if (directory.empty()) directory = ".";
  // O_EXCL with a random name rather than mkstemp: mkstemp's fixed 0600 mode would ignore the
  // user's umask, and checkpoints should be readable like any other file the user writes.
  for (int attempt = 0;; ++attempt) {
    // Built with append(): GCC 12 reports a bogus -Wrestrict for "." + std::string.
    std::string temp_name(".");
    temp_name.append(target_.filename().string()).append(".tmp-").append(random_suffix());
    temp_path_ = directory / temp_name;
    int fd = retry_eintr(
        [&] { return ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644); });
    if (fd >= 0) {
      fd_ = FileDescriptor(fd);
      return;
    }
    if (errno != EEXIST || attempt >= 100) {
      int error_number = errno;
      temp_path_.clear();  // nothing was created
      throw IoError(fmt::format("cannot write {}: creating a temporary file in {} failed: {}",
                                describe(), directory.string(), errno_text(error_number)));
    }
  }
}

AtomicFile::~AtomicFile() {
  // Direct writes cannot be taken back: the descriptor just closes.
  if (committed_ || temp_path_.empty()) return;
  fd_ = FileDescriptor();  // close before unlinking
  if (::unlink(temp_path_.c_str()) != 0 && errno != ENOENT) {
    log_warning(fmt::format("cannot remove the temporary file {}: {}", temp_path_.string(),
                            std::strerror(errno)));
  }
}

std::string AtomicFile::describe() const {
  if (target_.empty() || target_ == path_) return path_.string();
  return fmt::format("{} (a symbolic link to {})", path_.string(), target_.string());
}

void AtomicFile::fail(const char* operation, int error_number) {
  if (direct_) {
    std::string hint = error_number == EPIPE ? "; the reader closed the pipe" : "";
    throw IoError(fmt::format("cannot write {}: {} failed: {}{}", describe(), operation,
                              errno_text(error_number), hint));
  }
  throw IoError(fmt::format(
      "cannot write {}: {} of the temporary file {} failed: {}; the "
      "previous file (if any) is unchanged",
      describe(), operation, temp_path_.filename().string(), errno_text(error_number)));
}

void AtomicFile::open_direct() {
  if (fd_.valid()) return;
  int fd = retry_eintr([&] { return ::open(target_.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC); });
  if (fd < 0) fail("open", errno);
  fd_ = FileDescriptor(fd);
}

void AtomicFile::write(const void* data, std::size_t num_bytes) {
  AIACC_CHECK(!committed_ && (fd_.valid() || direct_), "write to {} after commit", path_.string());
  if (direct_) open_direct();
  std::optional<SigpipeGuard> no_sigpipe;
  if (direct_) no_sigpipe.emplace();
  const auto* cursor = static_cast<const unsigned char*>(data);
  // zlib's crc32 takes a uInt length; feed it in pieces below 4 GiB.
  for (std::size_t done = 0; done < num_bytes;) {
    std::size_t piece = std::min<std::size_t>(num_bytes - done, std::size_t{1} << 30);
    crc32_ = static_cast<std::uint32_t>(::crc32(crc32_, cursor + done, static_cast<uInt>(piece)));
    done += piece;
  }
  while (num_bytes > 0) {
    std::size_t chunk = std::min<std::size_t>(num_bytes, std::size_t{1} << 30);
    ssize_t put = retry_eintr([&] { return ::write(fd_.get(), cursor, chunk); });
    if (put < 0) fail("write", errno);
    // write() returning 0 for a non-zero count is not expected from a regular file; treat it as
    // a full disk rather than spinning.
    if (put == 0) fail("write", ENOSPC);
    cursor += put;
    num_bytes -= static_cast<std::size_t>(put);
    bytes_written_ += static_cast<std::uint64_t>(put);
  }
}

void AtomicFile::commit() {
  AIACC_CHECK(!committed_ && (fd_.valid() || direct_), "commit of {} twice", path_.string());
  if (direct_) {
    open_direct();  // even with nothing written: a FIFO's reader then sees an empty file
    int fd = fd_.release();
    committed_ = true;
    if (::close(fd) != 0 && errno != EINTR) fail("close", errno);
    return;
  }
  // fsync before rename: otherwise a crash after the rename can leave an empty or partial file
  // under the final name (the metadata may reach the disk before the data).
  if (retry_eintr([&] { return ::fsync(fd_.get()); }) != 0) fail("fsync", errno);
  {
    int fd = fd_.release();
    if (::close(fd) != 0 && errno != EINTR) fail("close", errno);
  }
  if (retry_eintr([&] { return ::rename(temp_path_.c_str(), target_.c_str()); }) != 0) {
    fail("rename", errno);
  }
  committed_ = true;
  std::filesystem::path directory = target_.parent_path();
  fsync_directory(directory.empty() ? std::filesystem::path(".") : directory);
}

std::uint32_t write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
  return file.crc32();
}

}  // namespace aiacc::io
