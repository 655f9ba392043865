// util::exact_auc against AUC as its definition says (every positive-negative pair, ties one
// half), over scores with many ties, both signs, both zeros, infinities and a narrow range
// (whose keys share their top bytes, so the sort skips those passes).
#include "core/util/exact_auc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "core/error.h"

namespace aiacc::util {
namespace {

// Exact while the counts stay below 2^53: wins are whole or half numbers.
double pair_count_auc(const std::vector<double>& scores, const std::vector<std::uint8_t>& labels) {
  double wins = 0, positives = 0, negatives = 0;
  for (std::size_t i = 0; i < scores.size(); ++i) (labels[i] != 0 ? positives : negatives) += 1;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (labels[i] == 0) continue;
    for (std::size_t j = 0; j < scores.size(); ++j) {
      if (labels[j] != 0) continue;
      wins += scores[i] > scores[j] ? 1.0 : (scores[i] == scores[j] ? 0.5 : 0.0);
    }
  }
  return wins / (positives * negatives);
}

TEST(ExactAuc, KnownValuesAndTies) {
  EXPECT_DOUBLE_EQ(exact_auc(std::vector<double>{0.1, 0.4, 0.35, 0.8}, std::vector<std::uint8_t>{0, 0, 1, 1}).value(), 0.75);
  EXPECT_DOUBLE_EQ(exact_auc(std::vector<double>{0.5, 0.5, 0.5}, std::vector<std::uint8_t>{1, 0, 0}).value(), 0.5);
  EXPECT_DOUBLE_EQ(exact_auc(std::vector<double>{1, 2, 2, 3}, std::vector<std::uint8_t>{0, 1, 0, 1}).value(), 3.5 / 4);
  // Labels other than 0 count as positive; -0.0 and 0.0 compare equal, so they tie.
  EXPECT_DOUBLE_EQ(exact_auc(std::vector<double>{-0.0, 0.0}, std::vector<std::uint8_t>{7, 0}).value(), 0.5);
  EXPECT_DOUBLE_EQ(exact_auc(std::vector<double>{0.0, -0.0, -1e-300}, std::vector<std::uint8_t>{1, 0, 0}).value(), 0.75);
  // Denormals of both signs: the smallest magnitudes order around the zeros.
  const double tiny = std::numeric_limits<double>::denorm_min();
  EXPECT_DOUBLE_EQ(exact_auc(std::vector<double>{-tiny, -0.0, tiny, -2 * tiny}, std::vector<std::uint8_t>{1, 0, 1, 0}).value(),
                   0.75);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_DOUBLE_EQ(exact_auc(std::vector<double>{-inf, inf, -1e308, 1e308}, std::vector<std::uint8_t>{0, 1, 1, 0}).value(), 0.75);
}

TEST(ExactAuc, UndefinedCasesAndBadInput) {
  const std::vector<double> scores = {1, 2, 2, 3};
  EXPECT_FALSE(exact_auc(scores, std::vector<std::uint8_t>{1, 1, 1, 1}).has_value());
  EXPECT_FALSE(exact_auc(scores, std::vector<std::uint8_t>{0, 0, 0, 0}).has_value());
  EXPECT_FALSE(exact_auc(std::vector<double>{}, std::vector<std::uint8_t>{}).has_value());
  EXPECT_TRUE(std::isnan(exact_auc(std::vector<double>{1, NAN, 3}, std::vector<std::uint8_t>{0, 1, 1}).value()));
  EXPECT_THROW(exact_auc(scores, std::vector<std::uint8_t>{1}), InternalError);
}

TEST(ExactAuc, EqualsThePairCountOverRandomScores) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t n = 1 + rng() % 700;
    std::vector<double> scores(n);
    std::vector<std::uint8_t> labels(n);
    for (std::size_t i = 0; i < n; ++i) {
      switch (trial % 4) {
        case 0:  // few distinct values of both signs: ties everywhere
          scores[i] = static_cast<double>(static_cast<int>(rng() % 9) - 4) * 0.25;
          break;
        case 1:  // logits of both signs and many magnitudes
          scores[i] = std::ldexp(static_cast<double>(rng() % 2001) - 1000.0, static_cast<int>(rng() % 60) - 30);
          break;
        case 2:  // a narrow range: the keys' top bytes are all alike
          scores[i] = 1.0 + static_cast<double>(rng() % 5000) / 4096.0;
          break;
        default:  // both zeros, infinities and a few plain values
          scores[i] = std::array<double, 6>{-0.0, 0.0, std::numeric_limits<double>::infinity(),
                                            -std::numeric_limits<double>::infinity(), 1e-310, -3.5}[rng() % 6];
      }
      labels[i] = static_cast<std::uint8_t>(rng() % 3 == 0 ? 1 : 0);
    }
    const std::optional<double> got = exact_auc(scores, labels);
    const bool both = std::count(labels.begin(), labels.end(), 1) > 0 && std::count(labels.begin(), labels.end(), 0) > 0;
    ASSERT_EQ(got.has_value(), both) << "trial " << trial;
    if (both) {
      EXPECT_EQ(*got, pair_count_auc(scores, labels)) << "trial " << trial << ", " << n << " scores";
    }
  }
}

}  // namespace
}  // namespace aiacc::util
