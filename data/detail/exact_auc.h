// The exact area under the ROC curve of scores against binary labels. Internal to data/ (the
// synthetic CTR teacher's reference AUC); the trainer's streaming AUC metric is elsewhere.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace aiacc::data::detail {

// P(score of a random positive > score of a random negative), ties counting one half: the
// Mann-Whitney U statistic over P * N, by sorting, O(n log n) time and O(n) memory. Labels are
// 0 or 1 (anything non-zero counts as 1). nullopt when either class is absent. Throws
// InternalError when the spans differ in length. Thread-safe.
std::optional<double> exact_auc(std::span<const double> scores, std::span<const std::uint8_t> labels);

}  // namespace aiacc::data::detail
