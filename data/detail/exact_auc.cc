// Exact AUC by sorting: walk the scores in increasing order one tie group at a time; each
// positive in a group beats every negative below the group and ties half of those inside it.
#include "data/detail/exact_auc.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/check.h"

namespace aiacc::data::detail {

std::optional<double> exact_auc(std::span<const double> scores, std::span<const std::uint8_t> labels) {
  AIACC_CHECK_EQ(scores.size(), labels.size(), "scores and labels");
  std::vector<std::pair<double, bool>> pairs(scores.size());
  for (std::size_t i = 0; i < scores.size(); ++i) pairs[i] = {scores[i], labels[i] != 0};
  std::sort(pairs.begin(), pairs.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // Twice U as an integer: exact (no rounding) while 2 * P * N < 2^64.
  std::uint64_t twice_u = 0, positives = 0, negatives_below = 0;
  for (std::size_t begin = 0; begin < pairs.size();) {
    std::size_t end = begin;
    std::uint64_t group_positives = 0, group_negatives = 0;
    while (end < pairs.size() && pairs[end].first == pairs[begin].first) {
      (pairs[end].second ? group_positives : group_negatives) += 1;
      ++end;
    }
    twice_u += group_positives * (2 * negatives_below + group_negatives);
    positives += group_positives;
    negatives_below += group_negatives;
    begin = end;
  }
  if (positives == 0 || negatives_below == 0) return std::nullopt;
  return static_cast<double>(twice_u) / (2.0 * static_cast<double>(positives) * static_cast<double>(negatives_below));
}

}  // namespace aiacc::data::detail
