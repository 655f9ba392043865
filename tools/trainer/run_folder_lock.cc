#include "tools/trainer/run_folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"

namespace aiacc::trainer {
namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// What the holder wrote: "pid 4242 on node-a since 2026-11-26 15:40:01".
std::string holder_of(int fd) {
  char text[256] = {};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  if (got <= 0) return "another process";
  std::string holder(text, static_cast<std::size_t>(got));
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
  return holder.empty() ? "another process" : holder;
}

}  // namespace

RunFolderLock::RunFolderLock(const std::filesystem::path& run_folder) {
  const std::filesystem::path path = run_folder / ".lock";
  fd_ = io::open_retrying(path, O_RDWR | O_CREAT, 0644);
  if (!fd_.valid()) {
    throw IoError(fmt::format("cannot open {} (the run folder's lock): {}", path.string(), std::strerror(errno)));
  }
  if (!io::flock_retrying(fd_, LOCK_EX | LOCK_NB)) {
    if (errno == EWOULDBLOCK) {
      throw ConfigError(fmt::format(
          "the run folder {} is in use by another job ({}): two jobs in one folder would mix their checkpoints "
          "and metrics; wait for it to end, or use another job.name or job.run_dir",
          run_folder.string(), holder_of(fd_.get())));
    }
    if (errno == ENOSYS || errno == EOPNOTSUPP || errno == ENOLCK || errno == EINVAL) {
      // A shared filesystem without locks (Lustre without flock, NFS without a lock manager):
      // the job runs, unguarded, rather than not at all.
      log::get("trainer")->warn("cannot lock the run folder {} ({}: this filesystem has no locks): nothing stops "
                                "a second job from using it at the same time", run_folder.string(),
                                std::strerror(errno));
      fd_ = io::FileDescriptor();
      return;
    }
    throw IoError(fmt::format("cannot lock {}: {}", path.string(), std::strerror(errno)));
  }
  // For the next job's message; the lock itself is the flock, not this text.
  const std::string holder = fmt::format("pid {} on {} since {:%Y-%m-%d %H:%M:%S}\n", ::getpid(), host_name(),
                                         fmt::localtime(std::chrono::system_clock::to_time_t(
                                             std::chrono::system_clock::now())));
  if (::ftruncate(fd_.get(), 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_.get(), holder.data(), holder.size(), 0);
  }
}

}  // namespace aiacc::trainer
