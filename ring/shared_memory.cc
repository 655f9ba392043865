#include "ring/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::ring {
namespace {

std::byte* map(int fd, std::size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int error = errno;
    close(fd);
    throw IoError(fmt::format("mmap of shared memory {} ({} bytes) failed: {}", name, bytes, std::strerror(error)));
  }
  close(fd);  // the mapping keeps the segment
  return static_cast<std::byte*>(p);
}

}  // namespace

SharedMemory SharedMemory::create(const std::string& name, std::size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw IoError(fmt::format("shm_open({}) to create failed: {}", name, std::strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    close(fd);
    shm_unlink(name.c_str());
    throw IoError(fmt::format("sizing shared memory {} to {} bytes failed: {} (is /dev/shm large enough?)", name, bytes,
                              std::strerror(error)));
  }
  // ftruncate on tmpfs reserves nothing: a /dev/shm smaller than the segment (a container's
  // 64 MiB default) would kill the first write past its end with SIGBUS. Take the pages now.
  int error = 0;
  do {
    error = bytes > 0 ? posix_fallocate(fd, 0, static_cast<off_t>(bytes)) : 0;
  } while (error == EINTR);  // tmpfs gives up on a pending signal
  if (error != 0) {
    close(fd);
    shm_unlink(name.c_str());
    throw IoError(fmt::format("reserving {} bytes of shared memory for {} failed: {} (is /dev/shm large enough? "
                              "a container's is often 64 MiB: raise it, e.g. docker run --shm-size, or set "
                              "cluster.ring.hierarchical: false)",
                              bytes, name, std::strerror(error)));
  }
  try {
    return SharedMemory(name, map(fd, bytes, name), bytes, true);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
}

SharedMemory SharedMemory::open(const std::string& name, std::size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) throw IoError(fmt::format("shm_open({}) failed: {}", name, std::strerror(errno)));
  struct stat info {};
  if (fstat(fd, &info) != 0 || static_cast<std::size_t>(info.st_size) < bytes) {
    close(fd);
    throw IoError(fmt::format("shared memory {} holds {} bytes, expected {}: the ranks disagree on the buffer", name,
                              static_cast<long long>(info.st_size), bytes));
  }
  return SharedMemory(name, map(fd, bytes, name), bytes, false);
}

SharedMemory::SharedMemory(SharedMemory&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owner_(std::exchange(other.owner_, false)) {}

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

SharedMemory::~SharedMemory() { release(); }

void SharedMemory::unlink() {
  if (owner_) shm_unlink(name_.c_str());
  owner_ = false;
}

void SharedMemory::release() noexcept {
  if (owner_) shm_unlink(name_.c_str());
  owner_ = false;
  if (data_) munmap(data_, size_);
  data_ = nullptr;
}

std::string segment_prefix(int pid) { return fmt::format("/aiacc-{}-", pid); }

int remove_segments_of(int pid) {
  // POSIX shared memory lives in /dev/shm on Linux; a name there is the segment's without its
  // leading slash.
  const std::string prefix = segment_prefix(pid).substr(1);
  int removed = 0;
  std::error_code error;
  for (std::filesystem::directory_iterator it("/dev/shm", error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0 && shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace aiacc::ring
