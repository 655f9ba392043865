// Exact AUC: each score becomes a 64-bit key that orders as the score does, the positives' keys
// and the negatives' are sorted apart (LSD radix), and one merge walks both in increasing order:
// every positive beats the negatives below its key and ties half of those equal to it.
#include "core/util/exact_auc.h"

#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <span>
#include <utility>

#include "core/check.h"

namespace aiacc::util {
namespace {

// Unsigned keys in the order of the doubles: 2^63 plus the magnitude's bits for a score with
// the sign bit clear, 2^63 less them where it is set (so -0.0 and 0.0 both get 2^63 and tie, as
// they compare equal). Subtracting, not flipping every bit, keeps the low bytes of scores that
// were floats (29 low mantissa bits zero) zero on both sides, so the sort skips those passes.
std::uint64_t order_key(double score) {
  constexpr std::uint64_t kSign = std::uint64_t{1} << 63;
  const auto bits = std::bit_cast<std::uint64_t>(score);
  return (bits & kSign) != 0 ? kSign - (bits & ~kSign) : kSign + bits;
}

// Sorts `keys` with 8 passes of 8 bits, least significant first, to and fro between `keys` and
// `scratch` (as large); returns the one holding the sorted keys. A pass whose byte is the same in
// every key is skipped.
std::span<std::uint64_t> radix_sort(std::span<std::uint64_t> keys, std::span<std::uint64_t> scratch) {
  constexpr int kPasses = 8;
  std::array<std::array<std::size_t, 256>, kPasses> counts{};
  for (const std::uint64_t key : keys) {
    for (int pass = 0; pass < kPasses; ++pass) ++counts[static_cast<std::size_t>(pass)][(key >> (8 * pass)) & 0xff];
  }
  for (int pass = 0; pass < kPasses; ++pass) {
    auto& count = counts[static_cast<std::size_t>(pass)];
    if (count[(keys.front() >> (8 * pass)) & 0xff] == keys.size()) continue;
    std::size_t at = 0;
    for (std::size_t& c : count) {
      const std::size_t n = c;
      c = at;
      at += n;
    }
    for (const std::uint64_t key : keys) scratch[count[(key >> (8 * pass)) & 0xff]++] = key;
    std::swap(keys, scratch);
  }
  return keys;
}

}  // namespace

std::optional<double> exact_auc(std::span<const double> scores, std::span<const std::uint8_t> labels) {
  AIACC_CHECK_EQ(scores.size(), labels.size(), "scores and labels");
  std::size_t num_positives = 0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i])) return std::numeric_limits<double>::quiet_NaN();
    num_positives += labels[i] != 0 ? 1 : 0;
  }
  if (num_positives == 0 || num_positives == scores.size()) return std::nullopt;
  // Left uninitialised (every key is written before it is read): zeroing them cost as much as
  // a sort pass.
  const std::size_t n = scores.size();
  const auto keys = std::make_unique_for_overwrite<std::uint64_t[]>(n);
  const auto scratch = std::make_unique_for_overwrite<std::uint64_t[]>(n);  // the same halves: each sort may end there
  for (std::size_t i = 0, p = 0, q = num_positives; i < n; ++i) keys[labels[i] != 0 ? p++ : q++] = order_key(scores[i]);
  const std::span<const std::uint64_t> positives =
      radix_sort(std::span(keys.get(), num_positives), std::span(scratch.get(), num_positives));
  const std::span<const std::uint64_t> negatives =
      radix_sort(std::span(keys.get() + num_positives, n - num_positives), std::span(scratch.get() + num_positives, n - num_positives));
  // Twice U as an integer: exact while 2 * P * N < 2^64 (three billion examples of each).
  std::uint64_t twice_u = 0;
  std::size_t below = 0;  // negatives whose key is below the current positive's
  for (std::size_t p = 0; p < positives.size();) {
    const std::uint64_t key = positives[p];
    std::size_t group_end = p;
    while (group_end < positives.size() && positives[group_end] == key) ++group_end;
    while (below < negatives.size() && negatives[below] < key) ++below;
    std::size_t tied_end = below;
    while (tied_end < negatives.size() && negatives[tied_end] == key) ++tied_end;
    twice_u += static_cast<std::uint64_t>(group_end - p) * (2 * below + (tied_end - below));
    p = group_end;
  }
  return static_cast<double>(twice_u) /
         (2.0 * static_cast<double>(positives.size()) * static_cast<double>(negatives.size()));
}

}  // namespace aiacc::util
