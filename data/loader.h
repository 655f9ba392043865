// The prefetching data loader: a background thread reads this rank's batches of an epoch from a
// Dataset (shuffled and sharded by ShardSampler, augmented when asked) into a bounded queue;
// the training loop takes them with next(). With prefetch_batches 0 there is no thread and
// next() reads each batch itself.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "core/batch.h"
#include "data/augment.h"
#include "data/dataset.h"
#include "data/shard_sampler.h"

namespace aiacc::data {

struct LoaderOptions {
  std::int64_t batch_size = 64;       // examples per batch on this rank
  bool shuffle = true;                // a new order every epoch (from seed and epoch)
  bool drop_last = true;              // equal full batches on every rank (see ShardSampler)
  // Queue depth: batches read ahead of the consumer by a background thread. 0: no thread;
  // next() reads each batch on the calling thread (when a worker has one core, reading there
  // costs the same CPU and happens at the same point of every step, where a background thread
  // preempts the step at random moments).
  std::int64_t prefetch_batches = 4;
  std::uint64_t seed = 0;             // shuffling and augmentation; the same on every rank
  AugmentOptions augment;             // image batches only; leave off for evaluation
  double timeout_s = 600;             // next() gives up (TimeoutError) after this long (background)
};

// Where the consumer stands: the next batch next() returns is `batch` of `epoch`. A checkpoint
// stores it; start_epoch(epoch, batch) resumes there. batch == batches_per_epoch() means the
// epoch is complete (resume with the next epoch).
struct LoaderPosition {
  std::int64_t epoch = 0;
  std::int64_t batch = 0;
};

class Loader {
 public:
  // `dataset` must outlive the loader. Nothing is read until start_epoch(). Throws
  // InternalError for bad options (batch_size or timeout_s not positive, prefetch_batches
  // negative, rank outside [0, world_size)) and ConfigError when augmentation is asked for
  // non-image data.
  Loader(Dataset& dataset, const LoaderOptions& options, int rank, int world_size);
  // The same, sharing the dataset's ownership with the reading threads: a thread left behind
  // after a timeout (see ~Loader) keeps the dataset alive until its read returns, so whoever
  // drops the dataset then (a trainer unwinding from the TimeoutError) cannot free it under
  // the read.
  Loader(std::shared_ptr<Dataset> dataset, const LoaderOptions& options, int rank, int world_size);

  // Stops the background thread and joins it. Never throws; waits at most for the one
  // Dataset::read() in flight, except after next() timed out: then a reading thread still
  // stuck in Dataset::read() is left behind (detached, logged), so the timeout reaches the
  // caller instead of hanging here. It touches nothing of the loader's when the read returns;
  // the dataset must then stay valid until that read returns or the process exits (the
  // shared_ptr constructor sees to that).
  ~Loader();

  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Begins reading `epoch` from batch `first_batch` (0: the start; up to batches_per_epoch()),
  // abandoning whatever remains of the previous epoch. Returns at once; reading happens in the
  // background (with prefetch_batches 0: in next()). Throws InternalError for a negative epoch
  // or first_batch out of range.
  void start_epoch(std::int64_t epoch, std::int64_t first_batch = 0);

  // The next batch of the current epoch, or nullopt once the epoch is exhausted. Blocks until
  // the background thread has one (with prefetch_batches 0: reads it now). An exception thrown
  // while reading (a DataError, ...) is rethrown here, after the batches read before it, and
  // again on every later call until start_epoch(). Throws TimeoutError when no batch arrives
  // within timeout_s (background reading only: with prefetch_batches 0 the read runs on this
  // thread and is not timed; every dataset here reads from memory), InternalError before the
  // first start_epoch(). Call from one thread.
  std::optional<Batch> next();

  // Batches next() yields per epoch on this rank (equal on every rank with drop_last).
  std::int64_t batches_per_epoch() const { return sampler_.batches_per_epoch(); }

  // Thread-safe.
  LoaderPosition position() const;

 private:
  // What the reading thread of one epoch shares with the loader: held by both, so that a loader
  // can leave a thread stuck in Dataset::read() behind.
  struct Shared {
    std::mutex mutex;
    std::condition_variable not_empty;  // the consumer waits: a batch, the end, or an error
    std::condition_variable not_full;   // the producer waits: room in the queue, or stop
    std::deque<Batch> queue;
    bool stop = false;                  // asks the producer to return
    bool done = false;                  // the producer has finished the epoch (or failed)
    std::exception_ptr error;
  };
  static void produce(const std::shared_ptr<Shared>& shared, Dataset& dataset, const ShardSampler& sampler,
                      const LoaderOptions& options, std::int64_t epoch, std::int64_t first_batch);
  // Batch `b` of an epoch whose example order is `indices`, read and augmented.
  static Batch read_batch(Dataset& dataset, const LoaderOptions& options, const std::vector<std::int64_t>& indices,
                          std::int64_t epoch, std::int64_t b);
  void stop_producer() noexcept;

  Dataset& dataset_;
  std::shared_ptr<Dataset> dataset_owner_;  // null when the caller keeps the dataset alive
  LoaderOptions options_;
  ShardSampler sampler_;

  mutable std::mutex mutex_;  // started_, position_, error_ (the consumer's side)
  bool started_ = false;
  LoaderPosition position_;
  std::exception_ptr error_;  // prefetch_batches == 0: the read that failed
  std::vector<std::int64_t> epoch_indices_;  // prefetch_batches == 0: the current epoch's order
  std::shared_ptr<Shared> shared_;  // the current epoch's reading thread's (prefetch_batches > 0)
  std::thread producer_;
  bool timed_out_ = false;  // next() gave up waiting for producer_
};

}  // namespace aiacc::data
