#include "ring/stream_pool.h"

#include "core/check.h"
#include "core/log.h"

namespace aiacc::ring {

StreamPool::StreamPool(int streams) : streams_(streams), errors_(static_cast<std::size_t>(streams)) {
  AIACC_CHECK(streams >= 1, "streams = {}", streams);
  for (int s = 1; s < streams; ++s) workers_.emplace_back([this, s] { worker(s); });
}

StreamPool::~StreamPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (auto& thread : workers_) thread.join();
}

void StreamPool::worker(int stream) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr error;
    try {
      (*job)(stream);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    errors_[static_cast<std::size_t>(stream)] = error;
    if (--running_ == 0) done_.notify_all();
  }
}

void StreamPool::run(const std::function<void(int stream)>& fn) {
  if (streams_ == 1) return fn(0);
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    running_ = streams_ - 1;
    for (auto& error : errors_) error = nullptr;
    ++generation_;
  }
  start_.notify_all();
  std::exception_ptr first;
  try {
    fn(0);
  } catch (...) {
    first = std::current_exception();
  }
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return running_ == 0; });
  job_ = nullptr;
  for (int s = 1; s < streams_; ++s) {
    auto& error = errors_[static_cast<std::size_t>(s)];
    if (!error) continue;
    if (!first) {
      first = error;
    } else {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        log::get("ring")->warn("stream {} also failed: {}", s, e.what());
      }
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace aiacc::ring
