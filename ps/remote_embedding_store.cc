// RemoteEmbeddingStore: step counting and prefetch around PsClient.
#include "ps/remote_embedding_store.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/check.h"
#include "core/error.h"
#include "core/kernels/row_copy.h"
#include "core/log.h"
#include "core/trace.h"

namespace aiacc::ps {
namespace {

// EmbeddingStore's callers pass unique ids (its contract; the embedding layers de-duplicate
// each batch, and WideDeep::embedding_ids the prefetched ones), so the client does not again.
constexpr RequestIds kIds = RequestIds::unique;

}  // namespace

RemoteEmbeddingStore::RemoteEmbeddingStore(std::shared_ptr<PsClient> client, const TableConfig& config)
    : client_(std::move(client)), config_(config) {
  AIACC_CHECK(client_ != nullptr, "remote embedding store '{}' without a client", config.spec.name);
  const TableOptions& o = config_.options;
  if (o.cache_rows > 0 && o.consistency == "sync" && o.cache_staleness > 0) {
    throw ConfigError(fmt::format(
        "table '{}': cache_staleness {} needs consistency async or bounded (a sync table's rows "
        "change every step, so its cache may only serve rows fetched in the same step: 0)",
        config_.spec.name, o.cache_staleness));
  }
  reset_cache();
  client_->create_table(config_);
}

RemoteEmbeddingStore::~RemoteEmbeddingStore() {
  // A prefetch still in flight (the trainer stopped after asking for the next step's rows)
  // writes into its row buffer when its reply comes, perhaps seconds later (a pull held for
  // bounded staleness): the client keeps the buffer until then. Waiting here instead could hold
  // a failing job's exit for the client's whole timeout. Moving the vector keeps its storage.
  if (prefetch_ && prefetch_->ticket.valid()) {
    client_->release_after(prefetch_->ticket, std::make_shared<std::vector<float>>(std::move(prefetch_->rows)));
  }
  if (!cache_) return;
  const embedding::HotRowCacheStats& c = cache_->stats();
  const std::int64_t served = c.hits + c.misses + c.refreshes;
  // Per table at debug level: the trainer logs the caches' sum (one line, not one per table).
  log::get("ps")->debug("table {}: hot-row cache of {} rows (staleness {}): {} of {} rows served "
                        "from it ({:.1f}%), {} fetched new, {} refreshed, {} evicted",
                        config_.spec.name, cache_->slots(), config_.options.cache_staleness, c.hits,
                        served, served > 0 ? 100.0 * static_cast<double>(c.hits) / static_cast<double>(served) : 0.0,
                        c.misses, c.refreshes, c.evictions);
}

void RemoteEmbeddingStore::set_read_only(bool on) {
  std::lock_guard lock(mutex_);
  read_only_ = on;
}

void RemoteEmbeddingStore::reset_cache() {
  const TableOptions& o = config_.options;
  if (o.cache_rows <= 0) return;
  cache_ = std::make_unique<embedding::HotRowCache>(o.cache_rows, o.cache_staleness);
  cached_rows_.assign(static_cast<std::size_t>(o.cache_rows) * static_cast<std::size_t>(config_.spec.dim), 0.0f);
  // Every slot a later pull reads is fetched anew into the new cache, and so listed again.
  last_slot_of_.clear();
  written_slots_.clear();
  slot_written_.assign(static_cast<std::size_t>(o.cache_rows), 0);
}

embedding::RowCachePlan RemoteEmbeddingStore::plan_batch(std::span<const std::int64_t> ids) {
  if (static_cast<std::int64_t>(ids.size()) > cache_->slots()) {
    // Named by aiacc-train's key: the trainer is what sets a table's cache, and its users know
    // no TableOptions.
    throw ConfigError(fmt::format("table '{}': a batch touches {} rows, more than the {} its hot-row cache holds "
                                  "(cluster.ps.cache_rows: {}); set cluster.ps.cache_rows to at least the rows a "
                                  "batch touches in one table ({} here; data.batch_size where each example has one "
                                  "id per table), or 0 for no cache",
                                  config_.spec.name, ids.size(), cache_->slots(), cache_->slots(), ids.size()));
  }
  return cache_->plan(ids, static_cast<std::int64_t>(step_));
}

Ticket RemoteEmbeddingStore::start_pull(std::span<const std::int64_t> ids, float* rows) {
  try {
    return client_->pull(config_.spec.name, ids, rows, step_, kIds);
  } catch (...) {
    if (cache_) reset_cache();  // as in settle(): a plan's rows will not arrive
    throw;
  }
}

void RemoteEmbeddingStore::settle(Prefetch& p) {
  try {
    client_->wait(p.ticket);  // never leave a ticket writing into freed memory
  } catch (...) {
    // The plan already counts its rows as held: forget every kept row rather than serve them.
    if (cache_) reset_cache();
    throw;
  }
  if (!cache_) return;
  if (p.before_sync_push) {
    // Its rows may predate this worker's sync push, yet its plan counts them as fetched at this
    // step: forget every kept row instead.
    reset_cache();
    return;
  }
  const auto d = static_cast<std::size_t>(config_.spec.dim);
  for (std::size_t j = 0; j < p.plan.fetch_slots.size(); ++j) {
    const std::int32_t slot = p.plan.fetch_slots[j];
    kernels::copy_row(cached_rows_.data() + static_cast<std::size_t>(slot) * d, p.rows.data() + j * d, d);
    if (!std::exchange(slot_written_[static_cast<std::size_t>(slot)], 1)) written_slots_.push_back(slot);
  }
}

void RemoteEmbeddingStore::copy_from_slots(const embedding::RowCachePlan& plan, float* rows) const {
  const auto d = static_cast<std::size_t>(config_.spec.dim);
  for (std::size_t i = 0; i < plan.slot_of.size(); ++i) {
    kernels::copy_row(rows + i * d, cached_rows_.data() + static_cast<std::size_t>(plan.slot_of[i]) * d, d);
  }
}

void RemoteEmbeddingStore::pull(std::span<const std::int64_t> ids, float* rows) {
  trace::Span span("ps", "pull " + config_.spec.name, {{"rows", ids.size()}});
  std::lock_guard lock(mutex_);
  if (pending_push_.valid()) {
    const Ticket push = std::exchange(pending_push_, Ticket());
    client_->wait(push);  // rows pulled after a push must reflect it
  }
  if (read_only_) {
    // The cache and a prefetch in flight stay as they are, for training to go on with.
    client_->wait(client_->pull(config_.spec.name, ids, rows, step_, kIds, /*read_only=*/true));
    return;
  }
  if (prefetch_) {
    // Settled before any new plan: the new one may evict the slots the prefetch fills.
    std::unique_ptr<Prefetch> p = std::move(prefetch_);
    settle(*p);
    if (!p->before_sync_push && p->step == step_ && std::equal(ids.begin(), ids.end(), p->ids.begin(), p->ids.end())) {
      if (cache_) {
        copy_from_slots(p->plan, rows);
        last_slot_of_ = std::move(p->plan.slot_of);
      } else if (!p->rows.empty()) {
        std::memcpy(rows, p->rows.data(), p->rows.size() * sizeof(float));
      }
      return;
    }
  }
  if (!cache_) {
    client_->wait(start_pull(ids, rows));
    return;
  }
  Prefetch fetch;
  fetch.plan = plan_batch(ids);
  fetch.rows.resize(fetch.plan.fetch_ids.size() * static_cast<std::size_t>(config_.spec.dim));
  fetch.ticket = start_pull(fetch.plan.fetch_ids, fetch.rows.data());
  settle(fetch);
  copy_from_slots(fetch.plan, rows);
  last_slot_of_ = std::move(fetch.plan.slot_of);
}

void RemoteEmbeddingStore::prefetch(std::span<const std::int64_t> ids) {
  std::lock_guard lock(mutex_);
  if (prefetch_) settle(*std::exchange(prefetch_, nullptr));
  auto p = std::make_unique<Prefetch>();
  p->ids.assign(ids.begin(), ids.end());
  p->step = step_;
  p->before_sync_push = pending_push_.valid() && config_.options.consistency == "sync";
  std::span<const std::int64_t> fetch_ids = p->ids;
  if (cache_) {
    p->plan = plan_batch(p->ids);
    fetch_ids = p->plan.fetch_ids;
  }
  p->rows.resize(fetch_ids.size() * static_cast<std::size_t>(config_.spec.dim));
  p->ticket = start_pull(fetch_ids, p->rows.data());
  prefetch_ = std::move(p);
}

void RemoteEmbeddingStore::push(std::span<const std::int64_t> ids, const float* grads, double lr) {
  push_async(ids, grads, lr);
  wait_push();
}

void RemoteEmbeddingStore::push_async(std::span<const std::int64_t> ids, const float* grads, double lr) {
  trace::Span span("ps", "push " + config_.spec.name, {{"rows", ids.size()}});
  std::lock_guard lock(mutex_);
  if (prefetch_) {
    // Rows fetched before this push would be stale for the next step. A cache still keeps
    // them, counted from the step they were fetched in, as its staleness bound allows.
    settle(*std::exchange(prefetch_, nullptr));
  }
  if (pending_push_.valid()) {
    const Ticket previous = std::exchange(pending_push_, Ticket());
    client_->wait(previous);
  }
  const std::uint64_t step = step_++;
  pending_push_ = client_->push(config_.spec.name, ids, grads, lr, step, kIds);
}

void RemoteEmbeddingStore::wait_push() {
  Ticket push;
  {
    std::lock_guard lock(mutex_);
    push = std::exchange(pending_push_, Ticket());
  }
  if (!push.valid()) return;
  trace::Span span("ps", "wait push " + config_.spec.name);
  client_->wait(push);
}

std::int64_t RemoteEmbeddingStore::num_rows() const {
  std::int64_t rows = 0;
  for (const auto& shard : client_->stats()) {
    for (const TableStats& s : shard) {
      if (s.name == config_.spec.name) rows += s.rows;
    }
  }
  return rows;
}

std::vector<std::pair<std::string, Tensor>> RemoteEmbeddingStore::save_rows() const {
  return client_->dump_rows(config_.spec.name);
}

void RemoteEmbeddingStore::load_rows(const std::vector<std::pair<std::string, Tensor>>& rows) {
  client_->load_rows(config_.spec.name, rows);
  std::lock_guard lock(mutex_);
  if (prefetch_) settle(*std::exchange(prefetch_, nullptr));
  reset_cache();  // the kept rows are not the loaded ones
}

embedding::HotRowCacheStats RemoteEmbeddingStore::cache_stats() const {
  std::lock_guard lock(mutex_);
  return cache_ ? cache_->stats() : embedding::HotRowCacheStats{};
}

bool RemoteEmbeddingStore::take_cache_slots(std::vector<std::int32_t>& slot_of, std::vector<std::int32_t>& written,
                                            std::vector<float>& rows, bool every_slot) {
  std::lock_guard lock(mutex_);
  if (!cache_ || read_only_) return false;  // a read-only pull's rows are not in the cache
  slot_of = last_slot_of_;
  const auto d = static_cast<std::size_t>(config_.spec.dim);
  if (every_slot) {
    written_slots_.clear();
    for (std::int32_t slot = 0; slot < static_cast<std::int32_t>(slot_written_.size()); ++slot) {
      written_slots_.push_back(slot);
      slot_written_[static_cast<std::size_t>(slot)] = 1;
    }
  }
  const std::size_t first = rows.size();
  rows.resize(first + written_slots_.size() * d);
  for (std::size_t j = 0; j < written_slots_.size(); ++j) {
    const auto slot = static_cast<std::size_t>(written_slots_[j]);
    kernels::copy_row(rows.data() + first + j * d, cached_rows_.data() + slot * d, d);
    slot_written_[slot] = 0;
  }
  written.insert(written.end(), written_slots_.begin(), written_slots_.end());
  written_slots_.clear();
  return true;
}

std::uint64_t RemoteEmbeddingStore::step() const {
  std::lock_guard lock(mutex_);
  return step_;
}

void RemoteEmbeddingStore::set_step(std::uint64_t step) {
  std::lock_guard lock(mutex_);
  if (prefetch_) settle(*std::exchange(prefetch_, nullptr));
  step_ = step;
  reset_cache();  // its fetch steps count from the old position
}

EmbeddingStoreFactory ps_embedding_store_factory(std::shared_ptr<PsClient> client,
                                                 const optim::OptimizerOptions& optimizer,
                                                 const TableOptions& options) {
  return [client = std::move(client), optimizer, options](const EmbeddingTableSpec& spec) {
    TableConfig config;
    config.spec = spec;
    config.optimizer = optimizer;
    config.options = options;
    return std::make_shared<RemoteEmbeddingStore>(client, config);
  };
}

}  // namespace aiacc::ps
