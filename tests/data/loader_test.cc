// Loader: coverage across ranks, drop_last, deterministic order, resume, error propagation,
// bounded prefetch, timeouts and prompt shutdown; datasets here label each example with its
// index so every batch says exactly which examples it holds.
#include "data/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "core/error.h"

namespace aiacc::data {
namespace {

using ::testing::HasSubstr;

// Example i is a [1, side, side] image of pixels 1000*i + p, labelled i.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(std::int64_t size, std::int64_t side = 1) : size_(size), side_(side) {}
  InputSpec spec() const override {
    InputSpec spec;
    spec.example_shape = Shape{1, side_, side_};
    spec.num_classes = size_;
    return spec;
  }
  std::int64_t size() const override { return size_; }
  void read(std::span<const std::int64_t> indices, Batch& batch) override {
    ++reads;
    struct CountReturn {
      std::atomic<int>& count;
      ~CountReturn() { ++count; }
    } count_return{returned};
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    {
      std::unique_lock lock(gate_mutex);
      gate_cv.wait(lock, [&] { return gate_open; });
    }
    const auto n = static_cast<std::int64_t>(indices.size());
    batch.inputs = Tensor::empty(Shape{n, 1, side_, side_});
    batch.labels = Tensor::empty(Shape{n}, DType::i64);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t index = indices[static_cast<std::size_t>(i)];
      if (index == fail_at) throw DataError("example " + std::to_string(index) + " is broken");
      batch.labels.data<std::int64_t>()[i] = index;
      for (std::int64_t p = 0; p < side_ * side_; ++p) {
        batch.inputs.data<float>()[i * side_ * side_ + p] = static_cast<float>(1000 * index + p);
      }
    }
  }
  void open_gate() {
    {
      std::lock_guard lock(gate_mutex);
      gate_open = true;
    }
    gate_cv.notify_all();
  }

  std::atomic<int> reads{0};
  std::atomic<int> returned{0};  // reads that have returned (or thrown)
  std::int64_t fail_at = -1;
  std::chrono::milliseconds delay{0};
  std::mutex gate_mutex;
  std::condition_variable gate_cv;
  bool gate_open = true;

 private:
  std::int64_t size_, side_;
};

LoaderOptions options(std::int64_t batch, bool drop_last, bool shuffle = true) {
  LoaderOptions o;
  o.batch_size = batch;
  o.drop_last = drop_last;
  o.shuffle = shuffle;
  o.prefetch_batches = 2;
  o.seed = 11;
  o.timeout_s = 10;
  return o;
}

// The label sequence of every batch left in the epoch.
std::vector<std::vector<std::int64_t>> drain(Loader& loader) {
  std::vector<std::vector<std::int64_t>> batches;
  while (auto batch = loader.next()) batches.push_back(batch->labels.to_vector<std::int64_t>());
  return batches;
}

class LoaderCoverage : public ::testing::TestWithParam<std::tuple<int, std::int64_t>> {};

TEST_P(LoaderCoverage, EveryExampleExactlyOncePerEpochAcrossRanks) {
  const auto [world, size] = GetParam();
  IndexDataset dataset(size);
  std::vector<int> seen(static_cast<std::size_t>(size), 0);
  for (int rank = 0; rank < world; ++rank) {
    Loader loader(dataset, options(3, false), rank, world);
    loader.start_epoch(4);
    auto batches = drain(loader);
    EXPECT_EQ(static_cast<std::int64_t>(batches.size()), loader.batches_per_epoch());
    for (std::size_t b = 0; b < batches.size(); ++b) {
      if (b + 1 < batches.size()) {
        EXPECT_EQ(batches[b].size(), 3u);
      }
      for (auto label : batches[b]) ++seen[static_cast<std::size_t>(label)];
    }
    EXPECT_FALSE(loader.next().has_value()) << "the end of an epoch stays the end";
  }
  EXPECT_EQ(seen, std::vector<int>(static_cast<std::size_t>(size), 1));
}

INSTANTIATE_TEST_SUITE_P(Worlds, LoaderCoverage,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values<std::int64_t>(10, 11, 12, 2)));

TEST(Loader, DropLastGivesEqualFullBatchesOnEveryRank) {
  IndexDataset dataset(23);
  std::set<std::int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    Loader loader(dataset, options(3, true), rank, 3);
    EXPECT_EQ(loader.batches_per_epoch(), 2);  // floor(floor(23 / 3) / 3)
    loader.start_epoch(0);
    auto batches = drain(loader);
    ASSERT_EQ(batches.size(), 2u);
    for (const auto& batch : batches) {
      EXPECT_EQ(batch.size(), 3u);
      for (auto label : batch) EXPECT_TRUE(seen.insert(label).second);
    }
  }
  EXPECT_EQ(seen.size(), 18u);
}

TEST(Loader, SameSeedAndEpochSameOrderOtherEpochDifferent) {
  IndexDataset dataset(40);
  Loader a(dataset, options(4, true), 0, 1), b(dataset, options(4, true), 0, 1);
  a.start_epoch(2);
  b.start_epoch(2);
  auto first = drain(a);
  EXPECT_EQ(first, drain(b));
  a.start_epoch(3);
  EXPECT_NE(first, drain(a));
  a.start_epoch(2);
  EXPECT_EQ(first, drain(a)) << "an epoch replays identically";
}

TEST(Loader, ResumeFromPositionReproducesTheRestOfTheEpoch) {
  IndexDataset dataset(30);
  Loader full(dataset, options(4, true), 1, 2);
  full.start_epoch(5);
  auto expected = drain(full);
  ASSERT_EQ(expected.size(), 3u);
  EXPECT_EQ(full.position().batch, 3);

  Loader interrupted(dataset, options(4, true), 1, 2);
  interrupted.start_epoch(5);
  ASSERT_TRUE(interrupted.next().has_value());
  ASSERT_TRUE(interrupted.next().has_value());
  const LoaderPosition saved = interrupted.position();
  EXPECT_EQ(saved.epoch, 5);
  EXPECT_EQ(saved.batch, 2);

  Loader resumed(dataset, options(4, true), 1, 2);
  resumed.start_epoch(saved.epoch, saved.batch);
  EXPECT_EQ(drain(resumed), std::vector<std::vector<std::int64_t>>(expected.begin() + 2, expected.end()));
  EXPECT_THROW(resumed.start_epoch(5, 4), InternalError);
}

TEST(Loader, StartEpochAbandonsTheRestOfThePreviousOne) {
  IndexDataset dataset(20);
  Loader loader(dataset, options(2, true), 0, 1);
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  loader.start_epoch(1);
  EXPECT_EQ(drain(loader).size(), 10u);
  EXPECT_EQ(loader.position().epoch, 1);
}

TEST(Loader, DatasetExceptionSurfacesFromNextAfterEarlierBatches) {
  IndexDataset dataset(10);
  dataset.fail_at = 5;
  Loader loader(dataset, options(2, false, /*shuffle=*/false), 0, 1);
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next().has_value());  // 0 1
  ASSERT_TRUE(loader.next().has_value());  // 2 3
  try {
    loader.next();  // 4 5
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("example 5 is broken"));
  }
  EXPECT_THROW(loader.next(), DataError);
  dataset.fail_at = -1;
  loader.start_epoch(1);
  EXPECT_EQ(drain(loader).size(), 5u);
}

// prefetch_batches 0: no background thread, the same batches in the same order, each read by
// next() itself (the dataset sees no read before the call), the same resume and error rules.
TEST(Loader, WithoutPrefetchNextReadsTheSameBatchesOnItsOwnThread) {
  IndexDataset dataset(30);
  Loader background(dataset, options(4, true), 1, 2);
  background.start_epoch(5);
  const auto expected = drain(background);

  auto inline_options = options(4, true);
  inline_options.prefetch_batches = 0;
  Loader loader(dataset, inline_options, 1, 2);
  dataset.reads = 0;
  loader.start_epoch(5);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(dataset.reads.load(), 0) << "nothing is read ahead";
  ASSERT_TRUE(loader.next().has_value());
  EXPECT_EQ(dataset.reads.load(), 1);
  EXPECT_EQ(loader.position().batch, 1);
  loader.start_epoch(5, 0);
  EXPECT_EQ(drain(loader), expected);
  EXPECT_FALSE(loader.next().has_value());
  loader.start_epoch(5, 2);
  EXPECT_EQ(drain(loader), std::vector<std::vector<std::int64_t>>(expected.begin() + 2, expected.end()));

  IndexDataset broken(10);
  broken.fail_at = 5;
  auto in_order = options(2, false, /*shuffle=*/false);
  in_order.prefetch_batches = 0;
  Loader failing(broken, in_order, 0, 1);
  failing.start_epoch(0);
  ASSERT_TRUE(failing.next().has_value());
  ASSERT_TRUE(failing.next().has_value());
  EXPECT_THROW(failing.next(), DataError);
  EXPECT_THROW(failing.next(), DataError) << "the error stays until start_epoch()";
  broken.fail_at = -1;
  failing.start_epoch(1);
  EXPECT_EQ(drain(failing).size(), 5u);
}

// With prefetch_batches 0 the read runs outside the loader's lock: position() answers from
// another thread while next() waits on a stalled read, and moves on once the read returns.
TEST(Loader, WithoutPrefetchPositionAnswersWhileNextReads) {
  IndexDataset dataset(20);
  auto inline_options = options(2, true);
  inline_options.prefetch_batches = 0;
  Loader loader(dataset, inline_options, 0, 1);
  loader.start_epoch(0);
  {
    std::lock_guard lock(dataset.gate_mutex);
    dataset.gate_open = false;
  }
  std::thread reader([&] { EXPECT_TRUE(loader.next().has_value()); });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (dataset.reads.load() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(dataset.reads.load(), 1) << "next() did not start reading";
  // Asked from a third thread, so a position() that waited for the read fails here instead of
  // hanging the test (the gate opens either way).
  auto position = std::async(std::launch::async, [&] { return loader.position().batch; });
  const bool answered = position.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
  dataset.open_gate();
  reader.join();
  const auto batch_during_read = position.get();
  EXPECT_TRUE(answered) << "position() waited for the read";
  if (answered) {
    EXPECT_EQ(batch_during_read, 0);
  }
  EXPECT_EQ(loader.position().batch, 1);
}

TEST(Loader, PrefetchIsBounded) {
  IndexDataset dataset(100);
  Loader loader(dataset, options(1, true), 0, 1);
  loader.start_epoch(0);
  // prefetch_batches = 2 queued plus one read waiting for room: 3 reads, then the producer waits.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (dataset.reads.load() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(dataset.reads.load(), 3);
  ASSERT_TRUE(loader.next().has_value());
  while (dataset.reads.load() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(dataset.reads.load(), 4) << "taking one batch makes room for exactly one more";
}

TEST(Loader, DestructorReturnsPromptlyMidEpoch) {
  IndexDataset dataset(1000);
  dataset.delay = std::chrono::milliseconds(20);
  const auto start = std::chrono::steady_clock::now();
  {
    Loader loader(dataset, options(1, true), 0, 1);
    loader.start_epoch(0);
    ASSERT_TRUE(loader.next().has_value());
  }
  { Loader never_started(dataset, options(1, true), 0, 1); }
  {
    Loader just_started(dataset, options(1, true), 0, 1);
    just_started.start_epoch(0);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(Loader, NextTimesOutWhenTheDatasetStalls) {
  IndexDataset dataset(10);
  dataset.gate_open = false;
  auto o = options(2, true);
  o.timeout_s = 0.05;
  Loader loader(dataset, o, 0, 1);
  loader.start_epoch(0);
  try {
    loader.next();
    ADD_FAILURE() << "no TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no batch within 0.05 s (epoch 0, batch 0)"));
  }
  dataset.open_gate();  // lets the stuck read finish so the destructor can join
}

// A loader destroyed after next() timed out, its reading thread still stuck in the dataset's
// read, returns at once (the timeout then reaches the trainer's caller instead of hanging in
// the unwinding); the thread it left behind finishes when the read returns, touching nothing of
// the loader's. The next epoch of another loader on the same dataset reads normally.
TEST(Loader, ALoaderThatTimedOutLeavesAStuckReadBehind) {
  IndexDataset dataset(10);
  dataset.gate_open = false;
  auto o = options(2, true);
  o.timeout_s = 0.05;
  std::chrono::steady_clock::duration destroy_took{};
  {
    auto loader = std::make_unique<Loader>(dataset, o, 0, 1);
    loader->start_epoch(0);
    EXPECT_THROW(loader->next(), TimeoutError);
    const auto start = std::chrono::steady_clock::now();
    loader.reset();
    destroy_took = std::chrono::steady_clock::now() - start;
  }
  EXPECT_LT(destroy_took, std::chrono::milliseconds(500));
  EXPECT_EQ(dataset.returned.load(), 0) << "the read was still stuck";
  dataset.open_gate();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (dataset.returned.load() < dataset.reads.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(dataset.returned.load(), dataset.reads.load());
  Loader again(dataset, options(2, true, /*shuffle=*/false), 0, 1);
  again.start_epoch(0);
  EXPECT_EQ(drain(again).size(), 5u);
}

// The same, with the dataset's owner letting go of it while the read is stuck (a trainer
// unwinding from the timeout): the thread left behind keeps it alive until its read returns.
TEST(Loader, AStuckReadKeepsASharedDatasetAliveUntilItReturns) {
  std::atomic<int> reads_out_at_destruction{-1};
  struct Watched : IndexDataset {
    Watched(std::int64_t size, std::atomic<int>& reads_out) : IndexDataset(size), reads_out_(reads_out) {}
    ~Watched() override { reads_out_ = reads.load() - returned.load(); }
    std::atomic<int>& reads_out_;
  };
  auto dataset = std::make_shared<Watched>(10, reads_out_at_destruction);
  dataset->gate_open = false;
  IndexDataset& gate = *dataset;
  auto o = options(2, true);
  o.timeout_s = 0.05;
  {
    Loader loader(std::shared_ptr<Dataset>(dataset), o, 0, 1);
    loader.start_epoch(0);
    EXPECT_THROW(loader.next(), TimeoutError);
  }
  std::weak_ptr<Dataset> watch = dataset;
  dataset.reset();
  ASSERT_FALSE(watch.expired()) << "the dataset was freed under its stuck read";
  gate.open_gate();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!watch.expired() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(watch.expired()) << "the thread left behind never let the dataset go";
  EXPECT_EQ(reads_out_at_destruction.load(), 0) << "destroyed while a read was still out";
}

TEST(Loader, MisuseIsReported) {
  IndexDataset dataset(10);
  Loader loader(dataset, options(2, true), 0, 1);
  EXPECT_THROW(loader.next(), InternalError);
  EXPECT_THROW(Loader(dataset, options(2, true), 2, 2), InternalError);
  auto negative_queue = options(2, true);
  negative_queue.prefetch_batches = -1;
  EXPECT_THROW(Loader(dataset, negative_queue, 0, 1), InternalError);

  class Flat : public IndexDataset {
   public:
    using IndexDataset::IndexDataset;
    InputSpec spec() const override {
      InputSpec spec;
      spec.example_shape = Shape{4};
      return spec;
    }
  } flat(10);
  auto augmented = options(2, true);
  augmented.augment.horizontal_flip = true;
  EXPECT_THROW(Loader(flat, augmented, 0, 1), ConfigError);
}

TEST(Loader, AugmentationDoesNotDependOnWorldSizeOrBatching) {
  IndexDataset dataset(24, 4);
  auto o = options(3, false);
  o.augment.horizontal_flip = true;
  o.augment.random_crop_padding = 1;
  // image of each example as produced by a single rank with batch 3
  std::map<std::int64_t, std::vector<float>> single;
  {
    Loader loader(dataset, o, 0, 1);
    loader.start_epoch(7);
    while (auto batch = loader.next()) {
      for (std::int64_t i = 0; i < batch->size(); ++i) {
        single[batch->labels.data<std::int64_t>()[i]] = batch->inputs.rows(i, i + 1).to_vector<float>();
      }
    }
  }
  ASSERT_EQ(single.size(), 24u);
  int changed = 0;
  o.batch_size = 2;
  for (int rank = 0; rank < 2; ++rank) {
    Loader loader(dataset, o, rank, 2);
    loader.start_epoch(7);
    while (auto batch = loader.next()) {
      for (std::int64_t i = 0; i < batch->size(); ++i) {
        const std::int64_t index = batch->labels.data<std::int64_t>()[i];
        auto image = batch->inputs.rows(i, i + 1).to_vector<float>();
        EXPECT_EQ(image, single[index]) << "example " << index;
        std::vector<float> plain(16);
        for (int p = 0; p < 16; ++p) plain[static_cast<std::size_t>(p)] = static_cast<float>(1000 * index + p);
        changed += image != plain;
      }
    }
  }
  EXPECT_GT(changed, 12) << "most examples should be cropped or flipped";
}

}  // namespace
}  // namespace aiacc::data
