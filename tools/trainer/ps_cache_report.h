// The workers' hot-row caches of parameter-server rows, summed over the tables and the workers
// at the end of a run: one log line and one metrics object instead of a line per table per
// worker (a model with hundreds of sharded tables printed hundreds).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/embedding/hot_row_cache.h"

namespace aiacc::ps {
class RemoteEmbeddingStore;
}

namespace aiacc::trainer {

class ProcessGroup;

struct PsCacheReport {
  int tables = 0;
  int workers = 0;
  embedding::HotRowCacheStats total;  // every worker's, every table's
  std::string least_served;           // the table whose cache served the smallest share ("": none asked)
  double least_served_share = 0.0;

  std::int64_t requested() const { return total.hits + total.misses + total.refreshes; }
  double served_share() const;
  // "71.3% of 1234 rows served from them, 300 fetched new, 54 refreshed, 0 evicted; ..."
  std::string describe() const;
  nlohmann::json to_json() const;
};

// Sums the caches of the tables that have one; a collective over `group` (null: this process
// alone), so every worker calls it with the same tables. nullopt where no table has a cache.
std::optional<PsCacheReport> ps_cache_report(const std::map<std::string, ps::RemoteEmbeddingStore*>& tables,
                                             ProcessGroup* group, int workers);

}  // namespace aiacc::trainer
