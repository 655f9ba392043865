// SharedMemory: a POSIX shared-memory segment mapped into this process (RAII: unmapped and
// closed on destruction). One rank creates it under a fresh name, the others on the host open
// it, and the creator unlinks the name once all have it, so a crash leaves nothing behind.
#pragma once

#include <cstddef>
#include <string>

namespace aiacc::ring {

class SharedMemory {
 public:
  // Creates a zero-filled segment of `bytes` under `name` ("/aiacc-..."); IoError if it exists.
  static SharedMemory create(const std::string& name, std::size_t bytes);
  // Maps an existing segment; IoError naming it if it is missing or smaller than `bytes`.
  static SharedMemory open(const std::string& name, std::size_t bytes);

  SharedMemory(SharedMemory&& other) noexcept;
  SharedMemory& operator=(SharedMemory&& other) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  ~SharedMemory();

  // Removes the name (mappings stay valid). Idempotent.
  void unlink();
  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  SharedMemory(std::string name, std::byte* data, std::size_t size, bool owner)
      : name_(std::move(name)), data_(data), size_(size), owner_(owner) {}
  void release() noexcept;

  std::string name_;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool owner_ = false;  // created it: unlinks the name at destruction if still linked
};

// The name prefix of every segment process `pid` creates ("/aiacc-<pid>-"): names are this
// prefix and whatever else makes them unique within the process.
std::string segment_prefix(int pid);
// Unlinks every segment process `pid` created and left linked, for a supervisor that reaped it:
// a creator unlinks the name as soon as every rank has mapped it, so only a process that died
// in between leaves one. Returns how many it removed.
int remove_segments_of(int pid);

}  // namespace aiacc::ring
