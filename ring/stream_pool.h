// StreamPool: one thread per communication stream, so the K connections to a peer move data
// concurrently (the AIACC multi-stream idea). run(fn) calls fn(stream) for every stream at once
// (stream 0 on the calling thread), waits for all and rethrows the first failure.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace aiacc::ring {

class StreamPool {
 public:
  // Starts streams - 1 worker threads (none for one stream).
  explicit StreamPool(int streams);
  ~StreamPool();  // stops and joins the workers
  StreamPool(const StreamPool&) = delete;
  StreamPool& operator=(const StreamPool&) = delete;

  // Runs fn(s) for s in [0, streams) concurrently and returns when all have returned. If any
  // threw, rethrows the first exception (the others are logged). Not reentrant: one run() at a
  // time (callers serialise; the communicator's users run collectives from one thread).
  void run(const std::function<void(int stream)>& fn);
  int streams() const { return streams_; }

 private:
  void worker(int stream);

  int streams_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  std::uint64_t generation_ = 0;
  int running_ = 0;
  bool stopping_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> workers_;
};

}  // namespace aiacc::ring
