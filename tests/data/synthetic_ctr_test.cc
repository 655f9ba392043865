// synthetic_ctr: the CTR batch layout, determinism per (seed, split, index), the
// calibrated positive rate, the teacher AUC in range and equal to a brute-force pair count,
// splits that differ but share one teacher whose deep part is a sum of two-field crosses, Zipf
// frequencies and missing values.
#include "data/synthetic_ctr.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"

namespace aiacc::data {
namespace {

using ::testing::HasSubstr;

SyntheticCtr::Options with_size(std::int64_t size) {
  SyntheticCtr::Options o;
  o.size = size;
  return o;
}

Batch read_range(Dataset& dataset, std::int64_t begin, std::int64_t end) {
  std::vector<std::int64_t> indices(static_cast<std::size_t>(end - begin));
  std::iota(indices.begin(), indices.end(), begin);
  Batch batch;
  dataset.read(indices, batch);
  return batch;
}

// AUC as its definition says: every (positive, negative) pair, ties one half. O(P * N).
double brute_force_auc(const std::vector<double>& scores, const std::vector<float>& labels) {
  std::vector<double> positives, negatives;
  for (std::size_t i = 0; i < scores.size(); ++i) (labels[i] > 0.5f ? positives : negatives).push_back(scores[i]);
  double wins = 0;
  for (double p : positives) {
    for (double n : negatives) wins += p > n ? 1.0 : (p == n ? 0.5 : 0.0);
  }
  return wins / (static_cast<double>(positives.size()) * static_cast<double>(negatives.size()));
}

TEST(SyntheticCtr, SpecAndBatchLayout) {
  SyntheticCtr dataset(with_size(500), {"train", 3});
  InputSpec spec = dataset.spec();
  EXPECT_EQ(spec.task, Task::binary);
  EXPECT_EQ(spec.example_shape, (Shape{13}));
  EXPECT_EQ(spec.num_classes, 0);
  ASSERT_EQ(spec.sparse_fields.size(), 26u);
  EXPECT_EQ(spec.sparse_fields[25], "C26");
  Batch batch = read_range(dataset, 0, 500);
  ASSERT_EQ(batch.inputs.shape(), (Shape{500, 13}));
  ASSERT_EQ(batch.labels.dtype(), DType::f32);
  for (std::int64_t i = 0; i < 500; ++i) {
    const float label = batch.labels.data<float>()[i];
    EXPECT_TRUE(label == 0.0f || label == 1.0f);
    EXPECT_EQ(label, dataset.label(i));
  }
  for (float x : batch.inputs.span<float>()) ASSERT_GE(x, 0.0f);
  ASSERT_EQ(batch.sparse.size(), 26u);
  for (const SparseField& field : batch.sparse) {
    ASSERT_EQ(field.offsets.size(), 501u);
    EXPECT_EQ(field.offsets.back(), 500);
    for (std::int64_t id : field.ids) ASSERT_TRUE(id == -1 || (id >= 0 && id <= 0xffffffffll)) << id;
  }
  std::vector<std::int64_t> outside = {500};
  EXPECT_THROW(dataset.read(outside, batch), InternalError);
}

TEST(SyntheticCtr, DeterministicPerSeedSplitAndIndex) {
  SyntheticCtr a(with_size(300), {"train", 7});
  SyntheticCtr b(with_size(300), {"train", 7});
  EXPECT_EQ(a.reference_auc(), b.reference_auc());
  std::vector<std::int64_t> picked = {17, 5, 299, 5};
  Batch ba, bb;
  a.read(picked, ba);
  b.read(picked, bb);
  EXPECT_EQ(ba.inputs.to_vector<float>(), bb.inputs.to_vector<float>());
  EXPECT_EQ(ba.labels.to_vector<float>(), bb.labels.to_vector<float>());
  // An example does not depend on what it is read with.
  Batch single = read_range(a, 5, 6);
  for (int c = 0; c < 26; ++c) {
    EXPECT_EQ(ba.sparse[static_cast<std::size_t>(c)].ids, bb.sparse[static_cast<std::size_t>(c)].ids);
    EXPECT_EQ(ba.sparse[static_cast<std::size_t>(c)].ids[1], single.sparse[static_cast<std::size_t>(c)].ids[0]);
    EXPECT_EQ(ba.sparse[static_cast<std::size_t>(c)].ids[3], single.sparse[static_cast<std::size_t>(c)].ids[0]);
  }
  SyntheticCtr other_seed(with_size(300), {"train", 8});
  Batch bo;
  other_seed.read(picked, bo);
  EXPECT_NE(ba.sparse[0].ids, bo.sparse[0].ids);
}

TEST(SyntheticCtr, PositiveRateAndTeacherAucInRangeAndExact) {
  const std::int64_t n = 20000;
  SyntheticCtr dataset(with_size(n), {"test", 1});
  EXPECT_GT(dataset.positive_fraction(), 0.2);
  EXPECT_LT(dataset.positive_fraction(), 0.3);
  ASSERT_TRUE(dataset.reference_auc().has_value());
  const double auc = *dataset.reference_auc();
  EXPECT_GT(auc, 0.75);
  EXPECT_LT(auc, 0.85);
  // An independent count: probabilities recomputed one example at a time, labels from read().
  std::vector<double> probabilities(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) probabilities[static_cast<std::size_t>(i)] = dataset.teacher_probability(i);
  const double brute = brute_force_auc(probabilities, read_range(dataset, 0, n).labels.to_vector<float>());
  EXPECT_NEAR(auc, brute, 1e-12);
  // The labels follow the probabilities: their means agree to sampling noise (~0.003).
  const double mean_p = std::accumulate(probabilities.begin(), probabilities.end(), 0.0) / static_cast<double>(n);
  EXPECT_NEAR(mean_p, dataset.positive_fraction(), 0.015);
}

TEST(SyntheticCtr, LogitScaleAndPositiveRateAreHonoured) {
  SyntheticCtr::Options o = with_size(8000);
  o.logit_scale = 0.5;
  o.positive_rate = 0.1;
  SyntheticCtr noisy(o, {"train", 2});
  o.logit_scale = 4;
  SyntheticCtr clean(o, {"train", 2});
  EXPECT_LT(*noisy.reference_auc() + 0.1, *clean.reference_auc());
  EXPECT_NEAR(noisy.positive_fraction(), 0.1, 0.02);
  EXPECT_NEAR(clean.positive_fraction(), 0.1, 0.03);
}

TEST(SyntheticCtr, SplitsDifferButShareTheTeacher) {
  SyntheticCtr train(with_size(4000), {"train", 5});
  SyntheticCtr test(with_size(4000), {"test", 5});
  SyntheticCtr other(with_size(10), {"test", 6});
  Batch a = read_range(train, 0, 100), b = read_range(test, 0, 100);
  EXPECT_NE(a.inputs.to_vector<float>(), b.inputs.to_vector<float>());
  EXPECT_NE(a.sparse[0].ids, b.sparse[0].ids);
  // One teacher: the same features get the same logit from both splits' teachers.
  std::vector<float> integers(13, 1.5f);
  std::vector<std::int32_t> ranks(26);
  for (int c = 0; c < 26; ++c) ranks[static_cast<std::size_t>(c)] = c * 7;
  const double logit = train.teacher().logit(integers.data(), ranks.data());
  EXPECT_EQ(logit, test.teacher().logit(integers.data(), ranks.data()));
  EXPECT_NE(logit, other.teacher().logit(integers.data(), ranks.data()));
  // And the same vocabulary: the most frequent value of a field is the same id in both splits.
  auto most_frequent = [](const Batch& batch) {
    std::map<std::int64_t, int> counts;
    for (std::int64_t id : batch.sparse[3].ids) ++counts[id];
    return std::max_element(counts.begin(), counts.end(), [](auto& x, auto& y) { return x.second < y.second; })->first;
  };
  EXPECT_EQ(most_frequent(read_range(train, 0, 4000)), most_frequent(read_range(test, 0, 4000)));
}

TEST(SyntheticCtr, TeacherInteractionsArePairwiseCrosses) {
  // ctr_teacher.h: each of the kHidden ReLU units reads one pair of fields, so a mixed
  // difference over two fields is non-zero only for those pairs, and over three fields it is 0.
  SyntheticCtr dataset(with_size(10), {"train", 9});
  const detail::CtrTeacher& teacher = dataset.teacher();
  Rng rng(11);
  std::vector<float> integers(13);
  for (float& z : integers) z = static_cast<float>(rng.uniform(0.0, 6.0));
  auto random_rank = [&] { return static_cast<std::int32_t>(rng.below(1001)); };  // 1000: missing
  int interacting_pairs = 0;
  std::vector<int> crossed;  // the first interacting pair
  for (int a = 0; a < 26; ++a) {
    for (int b = a + 1; b < 26; ++b) {
      double largest = 0;
      for (int trial = 0; trial < 8; ++trial) {
        std::vector<std::int32_t> ranks(26);
        for (auto& r : ranks) r = random_rank();
        const std::int32_t a1 = random_rank(), b1 = random_rank();
        auto at = [&](std::int32_t ra, std::int32_t rb) {
          std::vector<std::int32_t> x = ranks;
          x[static_cast<std::size_t>(a)] = ra;
          x[static_cast<std::size_t>(b)] = rb;
          return teacher.logit(integers.data(), x.data());
        };
        const std::int32_t a0 = ranks[static_cast<std::size_t>(a)], b0 = ranks[static_cast<std::size_t>(b)];
        largest = std::max(largest, std::abs(at(a1, b1) - at(a0, b1) - at(a1, b0) + at(a0, b0)));
      }
      if (largest > 1e-9 && crossed.empty()) crossed = {a, b};
      interacting_pairs += largest > 1e-9;
    }
  }
  EXPECT_GE(interacting_pairs, detail::CtrTeacher::kHidden / 2);  // a unit off in every trial goes unseen
  EXPECT_LE(interacting_pairs, detail::CtrTeacher::kHidden);
  // No three-field interactions, not even over a crossed pair and a third field.
  ASSERT_EQ(crossed.size(), 2u);
  crossed.push_back(crossed[0] == 0 ? (crossed[1] == 1 ? 2 : 1) : 0);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::int32_t> ranks(26);
    for (auto& r : ranks) r = random_rank();
    const std::int32_t alt[3] = {random_rank(), random_rank(), random_rank()};
    double third = 0;
    for (int mask = 0; mask < 8; ++mask) {
      std::vector<std::int32_t> x = ranks;
      for (int f = 0; f < 3; ++f) {
        if (mask >> f & 1) x[static_cast<std::size_t>(crossed[static_cast<std::size_t>(f)])] = alt[f];
      }
      third += (std::popcount(static_cast<unsigned>(mask)) % 2 ? -1.0 : 1.0) * teacher.logit(integers.data(), x.data());
    }
    EXPECT_NEAR(third, 0.0, 1e-9);
  }
}

TEST(SyntheticCtr, ZipfFrequenciesAndMissingValues) {
  SyntheticCtr dataset(with_size(10000), {"train", 4});
  Batch batch = read_range(dataset, 0, 10000);
  std::map<std::int64_t, int> counts;
  std::int64_t missing = 0, total = 0;
  for (const SparseField& field : batch.sparse) {
    for (std::int64_t id : field.ids) {
      missing += id == -1;
      ++total;
    }
  }
  for (std::int64_t id : batch.sparse[0].ids) ++counts[id];
  int top = 0;
  for (const auto& [id, count] : counts) top = std::max(top, id == -1 ? 0 : count);
  // s = 1.05 over 1000 values: the top value takes ~1/7 of the examples, yet hundreds appear.
  EXPECT_GT(top, 1000);
  EXPECT_GT(counts.size(), 300u);
  EXPECT_NEAR(static_cast<double>(missing) / static_cast<double>(total), 0.05, 0.01);
}

TEST(SyntheticCtr, OversizedTeacherIsAConfigError) {
  SyntheticCtr::Options o = with_size(10);
  o.vocabulary = 10000000;
  try {
    SyntheticCtr dataset(o, {"train", 0});
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("lower vocabulary or teacher_dim"));
  }
  EXPECT_THROW(SyntheticCtr(with_size(10), {"validation", 0}), ConfigError);
}

}  // namespace
}  // namespace aiacc::data
