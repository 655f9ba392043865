// RunFolderLock: one job at a time in a run folder. Two jobs writing one folder would interleave
// their checkpoints and metrics (the second resuming from the first's half-written steps); the
// job's leader (worker 0) holds an exclusive flock on <run folder>/.lock while it trains, and a
// second job's leader is refused at once with who holds it. The kernel drops the lock when the
// holder exits however it ends, so a crashed job never leaves the folder locked.
#pragma once

#include <filesystem>

#include "core/io/atomic_file.h"

namespace aiacc::trainer {

class RunFolderLock {
 public:
  // Takes the lock (the folder must exist). ConfigError naming the folder and the holder (pid,
  // host, start time, as it wrote them) when another process has it; IoError when the lock file
  // cannot be opened.
  explicit RunFolderLock(const std::filesystem::path& run_folder);
  RunFolderLock(RunFolderLock&&) noexcept = default;
  RunFolderLock& operator=(RunFolderLock&&) noexcept = default;
  // False where the filesystem has no locks (the constructor warned): nothing keeps a second
  // job out of the folder then.
  bool held() const { return fd_.valid(); }

 private:
  io::FileDescriptor fd_;  // closing it releases the lock
};

}  // namespace aiacc::trainer
