#include "tools/trainer/ps_cache_report.h"

#include <vector>

#include <fmt/format.h>

#include "ps/remote_embedding_store.h"
#include "tools/trainer/process_group.h"

namespace aiacc::trainer {
namespace {

double share(std::int64_t hits, std::int64_t requested) {
  return requested > 0 ? static_cast<double>(hits) / static_cast<double>(requested) : 0.0;
}

}  // namespace

double PsCacheReport::served_share() const { return share(total.hits, requested()); }

std::string PsCacheReport::describe() const {
  return fmt::format("{:.1f}% of {} rows served from them, {} fetched new, {} refreshed, {} evicted{}",
                     100.0 * served_share(), requested(), total.misses, total.refreshes, total.evictions,
                     tables > 1 && !least_served.empty()
                         ? fmt::format("; the least served {} ({:.1f}%)", least_served, 100.0 * least_served_share)
                         : std::string());
}

nlohmann::json PsCacheReport::to_json() const {
  nlohmann::json out = {{"tables", tables},
          {"workers", workers},
          {"requested_rows", requested()},
          {"served_rows", total.hits},
          {"fetched_rows", total.misses},
          {"refreshed_rows", total.refreshes},
          {"evicted_rows", total.evictions},
          {"served_share", served_share()}};
  if (!least_served.empty()) {
    out["least_served"] = least_served;
    out["least_served_share"] = least_served_share;
  }
  return out;
}

std::optional<PsCacheReport> ps_cache_report(const std::map<std::string, ps::RemoteEmbeddingStore*>& tables,
                                             ProcessGroup* group, int workers) {
  // Four counts a table, in the map's (name) order, which every worker shares; doubles hold
  // counts up to 2^53 exactly.
  std::vector<std::string> names;
  std::vector<double> counts;
  for (const auto& [name, table] : tables) {
    if (table->cache_slots() == 0) continue;
    const embedding::HotRowCacheStats c = table->cache_stats();
    names.push_back(name);
    counts.insert(counts.end(), {static_cast<double>(c.hits), static_cast<double>(c.misses),
                                 static_cast<double>(c.refreshes), static_cast<double>(c.evictions)});
  }
  if (names.empty()) return std::nullopt;
  if (group != nullptr) group->sum(counts);
  PsCacheReport report;
  report.tables = static_cast<int>(names.size());
  report.workers = workers;
  for (std::size_t t = 0; t < names.size(); ++t) {
    const auto count = [&](std::size_t k) { return static_cast<std::int64_t>(counts[4 * t + k]); };
    const embedding::HotRowCacheStats c{count(0), count(1), count(2), count(3)};
    report.total.hits += c.hits;
    report.total.misses += c.misses;
    report.total.refreshes += c.refreshes;
    report.total.evictions += c.evictions;
    const std::int64_t requested = c.hits + c.misses + c.refreshes;
    const double served = share(c.hits, requested);
    // A table no step asked for rows is not the least served, only an idle one.
    if (requested > 0 && (report.least_served.empty() || served < report.least_served_share)) {
      report.least_served = names[t];
      report.least_served_share = served;
    }
  }
  return report;
}

}  // namespace aiacc::trainer
