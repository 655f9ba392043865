#include "core/config/suggest.h"

#include <algorithm>

#include <fmt/format.h>

namespace aiacc::config {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // Optimal-string-alignment distance over three rolling rows.
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::size_t> before(m + 1), previous(m + 1), current(m + 1);
  for (std::size_t j = 0; j <= m; ++j) previous[j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    before.swap(previous);
    previous.swap(current);
  }
  return previous[m];
}

std::string closest_name(const std::string& unknown, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, unknown.size() / 3) + 1;
  for (const auto& name : known) {
    std::size_t d = edit_distance(unknown, name);
    if (d < best_distance) {
      best_distance = d;
      best = name;
    }
  }
  return best;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

std::string join_names(const std::vector<std::string>& names, std::size_t shown) {
  if (names.size() <= shown) return join_names(names);
  if (shown == 0) return fmt::format("{} names", names.size());
  const auto end = names.begin() + static_cast<std::ptrdiff_t>(shown);
  return join_names(std::vector<std::string>(names.begin(), end)) + fmt::format(" and {} more", names.size() - shown);
}

}  // namespace aiacc::config
