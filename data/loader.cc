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

Loader::~Loader() { stop_producer(); }

void Loader::stop_producer() noexcept {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  not_full_.notify_all();
  if (producer_.joinable()) {
    try {
      producer_.join();
    } catch (const std::exception& e) {
      log::get("data")->error("data loader: cannot join the reading thread: {}", e.what());
    }
  }
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
    queue_.clear();
    stop_ = false;
    done_ = false;
    error_ = nullptr;
    started_ = true;
    position_ = {epoch, first_batch};
  }
  if (options_.prefetch_batches == 0) {
    epoch_indices_ = std::move(indices);
    return;
  }
  producer_ = std::thread([this, epoch, first_batch] { produce(epoch, first_batch); });
}

Batch Loader::read_batch(const std::vector<std::int64_t>& indices, std::int64_t epoch,
                         std::int64_t b) {
  const auto count = static_cast<std::int64_t>(indices.size());
  const std::int64_t begin = b * options_.batch_size;
  const std::int64_t end = std::min(begin + options_.batch_size, count);
  std::span<const std::int64_t> ids(indices.data() + begin, static_cast<std::size_t>(end - begin));
  Batch batch;
  dataset_.read(ids, batch);
  AIACC_CHECK_EQ(batch.size(), end - begin, "examples returned by Dataset::read");
  augment_batch(batch.inputs, ids, options_.augment, options_.seed, epoch);
  return batch;
}

void Loader::produce(std::int64_t epoch, std::int64_t first_batch) {
  try {
    const std::vector<std::int64_t> indices = sampler_.epoch_indices(epoch);
    for (std::int64_t b = first_batch; b < batches_per_epoch(); ++b) {
      {
        std::lock_guard lock(mutex_);
        if (stop_) return;
      }
      // Read outside the lock so the consumer keeps taking batches meanwhile.
      Batch batch = read_batch(indices, epoch, b);

      std::unique_lock lock(mutex_);
      not_full_.wait(lock, [&] {
        return stop_ || static_cast<std::int64_t>(queue_.size()) < options_.prefetch_batches;
      });
      if (stop_) return;
      queue_.push_back(std::move(batch));
      lock.unlock();
      not_empty_.notify_one();
    }
  } catch (...) {
    std::lock_guard lock(mutex_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  not_empty_.notify_all();
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
      Batch batch = read_batch(epoch_indices_, at.epoch, at.batch);
      lock.lock();
      ++position_.batch;
      return batch;
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      error_ = std::current_exception();
      throw;
    }
  }
  const auto timeout = std::chrono::duration<double>(options_.timeout_s);
  if (!not_empty_.wait_for(lock, timeout, [&] { return !queue_.empty() || done_; })) {
    throw TimeoutError(fmt::format("data loader: no batch within {} s (epoch {}, batch {}); is the "
                                   "dataset's storage stalled?", options_.timeout_s, position_.epoch,
                                   position_.batch));
  }
  if (!queue_.empty()) {
    Batch batch = std::move(queue_.front());
    queue_.pop_front();
    ++position_.batch;
    lock.unlock();
    not_full_.notify_one();
    return batch;
  }
  if (error_) std::rethrow_exception(error_);
  return std::nullopt;
}

LoaderPosition Loader::position() const {
  std::lock_guard lock(mutex_);
  return position_;
}

}  // namespace aiacc::data
