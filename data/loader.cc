// Loader: one producer thread per epoch feeding a bounded queue (or, with prefetch_batches 0,
// none: next() reads). Restarting the thread at each start_epoch() (instead of re-targeting a
// long-lived one) keeps the state machine small: an epoch's thread only ever sees its own epoch,
// and stopping it is a flag plus a join.
#include "data/loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/net/deadline.h"

namespace aiacc::data {
namespace {

ShardOptions shard_options(const Dataset& dataset, const LoaderOptions& options, int rank, int world_size) {
  ShardOptions shard;
  shard.dataset_size = dataset.size();
  shard.batch_size = options.batch_size;
  shard.shuffle = options.shuffle;
  shard.drop_last = options.drop_last;
  shard.seed = options.seed;
  shard.rank = rank;
  shard.world_size = world_size;
  return shard;
}

}  // namespace

Loader::Loader(Dataset& dataset, const LoaderOptions& options, int rank, int world_size)
    : dataset_(dataset), options_(options), sampler_(shard_options(dataset, options, rank, world_size)) {
  AIACC_CHECK_GE(options.prefetch_batches, 0);
  AIACC_CHECK_GT(options.timeout_s, 0.0);
  if (options.augment.enabled()) {
    const Shape example = dataset.spec().example_shape;
    if (example.rank() != 3) {
      throw ConfigError(fmt::format("data.augment applies to images [C, H, W], but this dataset's "
                                    "examples are {}", example.str()));
    }
  }
}

Loader::Loader(std::shared_ptr<Dataset> dataset, const LoaderOptions& options, int rank, int world_size)
    : Loader(*dataset, options, rank, world_size) {
  dataset_owner_ = std::move(dataset);
}

Loader::~Loader() { stop_producer(); }

void Loader::stop_producer() noexcept {
  if (!producer_.joinable()) return;
  bool done = false;
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stop = true;
    done = shared_->done;
  }
  shared_->not_full.notify_all();
  try {
    if (timed_out_ && !done) {
      // Its read has not returned since next() gave up on it: joining could wait forever and
      // keep the timeout from its caller. It owns copies of what it needs after the read.
      log::get("data")->error("data loader: leaving the reading thread behind, stuck in the dataset's read");
      producer_.detach();
    } else {
      producer_.join();
    }
  } catch (const std::exception& e) {
    log::get("data")->error("data loader: cannot join the reading thread: {}", e.what());
  }
  timed_out_ = false;
}

void Loader::start_epoch(std::int64_t epoch, std::int64_t first_batch) {
  AIACC_CHECK_GE(epoch, 0);
  AIACC_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch(), "first batch {} of {}",
              first_batch, batches_per_epoch());
  // Without a producer thread the epoch's order is computed here, before any state changes, so
  // a failure leaves the loader as it was.
  std::vector<std::int64_t> indices;
  if (options_.prefetch_batches == 0) indices = sampler_.epoch_indices(epoch);
  stop_producer();
  {
    std::lock_guard lock(mutex_);
    error_ = nullptr;
    started_ = true;
    position_ = {epoch, first_batch};
  }
  if (options_.prefetch_batches == 0) {
    epoch_indices_ = std::move(indices);
    return;
  }
  // A fresh shared state each epoch: a thread left behind keeps its own.
  shared_ = std::make_shared<Shared>();
  producer_ = std::thread([shared = shared_, &dataset = dataset_, keep_alive = dataset_owner_, sampler = sampler_,
                           options = options_, epoch, first_batch] {
    produce(shared, dataset, sampler, options, epoch, first_batch);
  });
}

Batch Loader::read_batch(Dataset& dataset, const LoaderOptions& options, const std::vector<std::int64_t>& indices,
                         std::int64_t epoch, std::int64_t b) {
  const auto count = static_cast<std::int64_t>(indices.size());
  const std::int64_t begin = b * options.batch_size;
  const std::int64_t end = std::min(begin + options.batch_size, count);
  std::span<const std::int64_t> ids(indices.data() + begin, static_cast<std::size_t>(end - begin));
  Batch batch;
  dataset.read(ids, batch);
  AIACC_CHECK_EQ(batch.size(), end - begin, "examples returned by Dataset::read");
  augment_batch(batch.inputs, ids, options.augment, options.seed, epoch);
  return batch;
}

void Loader::produce(const std::shared_ptr<Shared>& shared, Dataset& dataset, const ShardSampler& sampler,
                     const LoaderOptions& options, std::int64_t epoch, std::int64_t first_batch) {
  Shared& s = *shared;
  try {
    const std::vector<std::int64_t> indices = sampler.epoch_indices(epoch);
    for (std::int64_t b = first_batch; b < sampler.batches_per_epoch(); ++b) {
      {
        std::lock_guard lock(s.mutex);
        if (s.stop) return;
      }
      // Read outside the lock so the consumer keeps taking batches meanwhile.
      Batch batch = read_batch(dataset, options, indices, epoch, b);

      std::unique_lock lock(s.mutex);
      s.not_full.wait(lock, [&] {
        return s.stop || static_cast<std::int64_t>(s.queue.size()) < options.prefetch_batches;
      });
      if (s.stop) return;
      s.queue.push_back(std::move(batch));
      lock.unlock();
      s.not_empty.notify_one();
    }
  } catch (...) {
    std::lock_guard lock(s.mutex);
    s.error = std::current_exception();
  }
  {
    std::lock_guard lock(s.mutex);
    s.done = true;
  }
  s.not_empty.notify_all();
}

std::optional<Batch> Loader::next() {
  std::unique_lock lock(mutex_);
  AIACC_CHECK(started_, "Loader::next() called before start_epoch()");
  if (options_.prefetch_batches == 0) {
    // On this thread. position_ stays under the lock for position(); the read runs outside it.
    if (error_) std::rethrow_exception(error_);
    const LoaderPosition at = position_;
    if (at.batch >= batches_per_epoch()) return std::nullopt;
    lock.unlock();
    try {
      Batch batch = read_batch(dataset_, options_, epoch_indices_, at.epoch, at.batch);
      lock.lock();
      ++position_.batch;
      return batch;
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      error_ = std::current_exception();
      throw;
    }
  }
  const LoaderPosition at = position_;
  lock.unlock();
  Shared& s = *shared_;
  std::unique_lock queue_lock(s.mutex);
  const auto timeout = net::duration_from_seconds(options_.timeout_s);
  if (!s.not_empty.wait_for(queue_lock, timeout, [&] { return !s.queue.empty() || s.done; })) {
    timed_out_ = true;
    throw TimeoutError(fmt::format("data loader: no batch within {} s (epoch {}, batch {}); is the "
                                   "dataset's storage stalled?", options_.timeout_s, at.epoch, at.batch));
  }
  if (!s.queue.empty()) {
    Batch batch = std::move(s.queue.front());
    s.queue.pop_front();
    queue_lock.unlock();
    s.not_full.notify_one();
    timed_out_ = false;  // the reader is not stuck after all
    std::lock_guard position_lock(mutex_);
    ++position_.batch;
    return batch;
  }
  if (s.error) std::rethrow_exception(s.error);
  return std::nullopt;
}

LoaderPosition Loader::position() const {
  std::lock_guard lock(mutex_);
  return position_;
}

}  // namespace aiacc::data
