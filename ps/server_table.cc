// ServerTable: admission and eviction bookkeeping around a LocalEmbeddingStore.
#include "ps/server_table.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/kernels/row_copy.h"
#include "core/log.h"

namespace aiacc::ps {
namespace {

// Info lines about a table's evictions come at most this often (each eviction is a debug line).
constexpr std::chrono::seconds kEvictionReportInterval{60};

LocalEmbeddingStoreOptions store_options(int num_partitions) {
  LocalEmbeddingStoreOptions options;
  options.num_partitions = num_partitions;
  return options;
}

}  // namespace

ServerTable::ServerTable(TableConfig config, int num_partitions)
    : config_(std::move(config)),
      config_yaml_(encode_table_config(config_)),
      num_partitions_(num_partitions),
      store_(std::make_unique<LocalEmbeddingStore>(config_.spec, config_.optimizer,
                                                   store_options(num_partitions))) {
  if (admission_enabled()) {
    scratch_ = std::make_unique<LocalEmbeddingStore>(config_.spec, config_.optimizer, store_options(1));
  }
  stats_.name = config_.spec.name;
}

void ServerTable::touch(std::span<const std::int64_t> ids, std::uint64_t step, bool count,
                        std::vector<std::size_t>& admitted, std::vector<std::size_t>& held) {
  const auto min_count = static_cast<std::uint64_t>(config_.options.min_count);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    Entry& entry = entries_[ids[i]];
    if (count) ++entry.count;
    entry.last_step = std::max(entry.last_step, step);
    // Without admission every row is admitted: a repeated pull does not count, so an id whose
    // entry was evicted since its first copy would stay below min_count.
    (!admission_enabled() || entry.count >= min_count ? admitted : held).push_back(i);
  }
}

void ServerTable::pull(std::span<const std::int64_t> ids, float* rows, std::uint64_t step, bool repeat) {
  if (!repeat) stats_.pulled_rows += static_cast<std::int64_t>(ids.size());
  if (!tracking_enabled()) {
    store_->pull(ids, rows);
    return;
  }
  std::vector<std::size_t> admitted;
  std::vector<std::size_t> held;
  touch(ids, step, !repeat, admitted, held);
  check_request_fits(admitted.size(), step);
  const auto d = static_cast<std::size_t>(dim());
  auto pull_subset = [&](LocalEmbeddingStore& store, const std::vector<std::size_t>& positions) {
    if (positions.empty()) return;
    std::vector<std::int64_t> subset(positions.size());
    for (std::size_t j = 0; j < positions.size(); ++j) subset[j] = ids[positions[j]];
    std::vector<float> out(positions.size() * d);
    store.pull(subset, out.data());
    for (std::size_t j = 0; j < positions.size(); ++j) {
      kernels::copy_row(rows + positions[j] * d, out.data() + j * d, d);
    }
  };
  pull_subset(*store_, admitted);
  if (!held.empty()) {
    pull_subset(*scratch_, held);
    scratch_->load_rows(LocalEmbeddingStore(config_.spec, config_.optimizer, store_options(1)).save_rows());
  }
  evict_if_needed();
  forget_unadmitted_if_needed();
}

void ServerTable::push(std::span<const std::int64_t> ids, const float* grads, double lr,
                       std::uint64_t step) {
  if (!tracking_enabled()) {
    stats_.pushed_rows += static_cast<std::int64_t>(ids.size());
    store_->push(ids, grads, lr);
    return;
  }
  std::vector<std::size_t> admitted;
  std::vector<std::size_t> held;
  touch(ids, step, true, admitted, held);
  check_request_fits(admitted.size(), step);
  stats_.not_admitted_rows += static_cast<std::int64_t>(held.size());
  stats_.pushed_rows += static_cast<std::int64_t>(admitted.size());
  if (held.empty()) {
    store_->push(ids, grads, lr);
  } else if (!admitted.empty()) {
    const auto d = static_cast<std::size_t>(dim());
    std::vector<std::int64_t> subset(admitted.size());
    std::vector<float> subset_grads(admitted.size() * d);
    for (std::size_t j = 0; j < admitted.size(); ++j) {
      subset[j] = ids[admitted[j]];
      std::memcpy(subset_grads.data() + j * d, grads + admitted[j] * d, d * sizeof(float));
    }
    store_->push(subset, subset_grads.data(), lr);
  }
  evict_if_needed();
  forget_unadmitted_if_needed();
}

void ServerTable::forget_unadmitted_if_needed() {
  const std::int64_t capacity = config_.options.capacity_rows;
  if (capacity <= 0 || !admission_enabled()) return;
  const auto rows = static_cast<std::size_t>(store_->num_rows());
  if (entries_.size() <= rows + static_cast<std::size_t>(capacity)) return;
  const auto min_count = static_cast<std::uint64_t>(config_.options.min_count);
  std::size_t unadmitted = 0;
  for (const auto& [id, entry] : entries_) unadmitted += entry.count < min_count ? 1 : 0;
  for (std::int64_t id : least_recent(/*admitted=*/false, unadmitted / 2)) entries_.erase(id);
}

std::vector<std::int64_t> ServerTable::least_recent(bool admitted, std::size_t count) const {
  const auto min_count = static_cast<std::uint64_t>(config_.options.min_count);
  std::vector<std::pair<std::uint64_t, std::int64_t>> by_age;  // (last step, id): ties by id
  by_age.reserve(entries_.size());
  for (const auto& [id, entry] : entries_) {
    if ((entry.count >= min_count) == admitted) by_age.emplace_back(entry.last_step, id);
  }
  count = std::min(count, by_age.size());
  std::nth_element(by_age.begin(), by_age.begin() + static_cast<std::ptrdiff_t>(count), by_age.end());
  std::vector<std::int64_t> ids;
  ids.reserve(count);
  for (std::size_t i = 0; i < count; ++i) ids.push_back(by_age[i].second);
  return ids;
}

void ServerTable::evict_if_needed() {
  const std::int64_t capacity = config_.options.capacity_rows;
  if (capacity <= 0) return;
  const std::int64_t rows = store_->num_rows();
  if (rows <= capacity) return;
  // At least 1% of the capacity goes each time: with evict_to_fraction near 1 every new row
  // would otherwise rebuild the whole table below (quadratic).
  const auto target = std::min(static_cast<std::int64_t>(static_cast<double>(capacity) * config_.options.evict_to_fraction),
                               capacity - std::max<std::int64_t>(1, capacity / 100));
  // The rows held are exactly the admitted entries. Drop the least recently touched (ties by
  // id, so every replica of this decision is the same) down to the target.
  std::vector<std::int64_t> victims =
      least_recent(/*admitted=*/true, static_cast<std::size_t>(std::max<std::int64_t>(rows - target, 0)));
  std::sort(victims.begin(), victims.end());

  // The store has no erase: rebuild it from its rows minus the victims (O(rows), amortised over
  // the (1 - evict_to_fraction) * capacity inserts until the next eviction).
  auto tensors = store_->save_rows();
  const Tensor& ids = tensors[0].second;
  const Tensor& values = tensors[1].second;
  const Tensor& state = tensors[2].second;
  const std::int64_t count = ids.dim(0);
  const auto d = static_cast<std::size_t>(dim());
  const auto s = static_cast<std::size_t>(store_->state_floats());
  const std::int64_t keep = count - static_cast<std::int64_t>(victims.size());
  Tensor kept_ids = Tensor::empty(Shape{keep}, DType::i64);
  Tensor kept_values = Tensor::empty(Shape{keep, dim()}, DType::f32);
  Tensor kept_state = Tensor::empty(Shape{keep, store_->state_floats()}, DType::f32);
  std::size_t out = 0;
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t id = ids.data<std::int64_t>()[r];
    if (std::binary_search(victims.begin(), victims.end(), id)) continue;
    const auto ru = static_cast<std::size_t>(r);
    kept_ids.data<std::int64_t>()[out] = id;
    std::memcpy(kept_values.data<float>() + out * d, values.data<float>() + ru * d, d * sizeof(float));
    if (s > 0) std::memcpy(kept_state.data<float>() + out * s, state.data<float>() + ru * s, s * sizeof(float));
    ++out;
  }
  store_->load_rows({{tensors[0].first, kept_ids}, {tensors[1].first, kept_values},
                     {tensors[2].first, kept_state}});
  for (std::int64_t id : victims) entries_.erase(id);
  stats_.evicted_rows += static_cast<std::int64_t>(victims.size());
  // A capacity below the rows a job touches evicts every few requests: one info line per
  // eviction flooded the log (3321 lines in a 100-step job of 26 tables).
  auto log = log::get("ps");
  log->debug("table {}: evicted {} least recently used rows ({} -> {} rows, capacity {})", name(), victims.size(),
             rows, keep, capacity);
  unreported_evicted_rows_ += static_cast<std::int64_t>(victims.size());
  ++unreported_evictions_;
  const auto now = std::chrono::steady_clock::now();
  if (!eviction_reported_) {
    log->info("table {}: evicted {} least recently used rows ({} -> {} rows, capacity_rows {}); further "
              "evictions are summarised here at most every {} s (each one is a debug line)",
              name(), victims.size(), rows, keep, capacity, kEvictionReportInterval.count());
  } else if (now - last_eviction_report_ >= kEvictionReportInterval) {
    log->info("table {}: evicted {} least recently used rows in {} evictions over the last {:.0f} s ({} rows "
              "evicted in all; {} rows now, capacity_rows {})",
              name(), unreported_evicted_rows_, unreported_evictions_,
              std::chrono::duration<double>(now - last_eviction_report_).count(), stats_.evicted_rows, keep,
              capacity);
  } else {
    return;
  }
  eviction_reported_ = true;
  last_eviction_report_ = now;
  unreported_evicted_rows_ = 0;
  unreported_evictions_ = 0;
}

void ServerTable::check_request_fits(std::size_t rows, std::uint64_t step) {
  const std::int64_t capacity = config_.options.capacity_rows;
  if (capacity <= 0 || warned_request_over_capacity_ || static_cast<std::int64_t>(rows) <= capacity) return;
  warned_request_over_capacity_ = true;
  log::get("ps")->warn("table {}: one request (step {}) holds {} rows of this shard, more than its capacity_rows "
                       "{}: every such request evicts rows, some of its own, which come back with their initial "
                       "values; raise capacity_rows above the rows a batch sends to one shard (warned once)",
                       name(), step, rows, capacity);
}

void ServerTable::load_rows(const std::vector<std::pair<std::string, Tensor>>& rows) {
  store_->load_rows(rows);
  if (!tracking_enabled()) return;
  // Loaded rows count as admitted and as touched at step 0.
  entries_.clear();
  for (const auto& [key, tensor] : rows) {
    if (key != name() + ".ids") continue;
    const auto min_count = static_cast<std::uint64_t>(config_.options.min_count);
    for (std::int64_t id : tensor.span<std::int64_t>()) entries_[id] = Entry{min_count, 0};
  }
}

TableStats ServerTable::stats() const {
  TableStats stats = stats_;
  stats.rows = store_->num_rows();
  stats.row_bytes = store_->row_bytes();
  stats.memory_bytes = store_->memory_bytes();
  if (tracking_enabled()) {
    // Node-based map: bucket pointer + node (next pointer, key, entry), rounded by malloc.
    stats.memory_bytes += entries_.bucket_count() * sizeof(void*) +
                          entries_.size() * (sizeof(void*) + sizeof(std::int64_t) + sizeof(Entry) + 8);
  }
  return stats;
}

}  // namespace aiacc::ps
