// RemoteEmbeddingStore: step counting and prefetch around PsClient.
#include "ps/remote_embedding_store.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/check.h"
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
  client_->create_table(config_);
}

void RemoteEmbeddingStore::pull(std::span<const std::int64_t> ids, float* rows) {
  trace::Span span("ps", "pull " + config_.spec.name, {{"rows", ids.size()}});
  std::lock_guard lock(mutex_);
  if (pending_push_.valid()) {
    const Ticket push = std::exchange(pending_push_, Ticket());
    client_->wait(push);  // rows pulled after a push must reflect it
  }
  if (prefetch_) {
    std::unique_ptr<Prefetch> p = std::move(prefetch_);
    client_->wait(p->ticket);  // never leave a ticket writing into freed memory
    if (p->step == step_ && std::equal(ids.begin(), ids.end(), p->ids.begin(), p->ids.end())) {
      if (!p->rows.empty()) std::memcpy(rows, p->rows.data(), p->rows.size() * sizeof(float));
      return;
    }
  }
  client_->wait(client_->pull(config_.spec.name, ids, rows, step_, kIds));
}

void RemoteEmbeddingStore::prefetch(std::span<const std::int64_t> ids) {
  std::lock_guard lock(mutex_);
  if (prefetch_) client_->wait(prefetch_->ticket);
  auto p = std::make_unique<Prefetch>();
  p->ids.assign(ids.begin(), ids.end());
  p->rows.resize(ids.size() * static_cast<std::size_t>(config_.spec.dim));
  p->step = step_;
  p->ticket = client_->pull(config_.spec.name, p->ids, p->rows.data(), step_, kIds);
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
    client_->wait(prefetch_->ticket);  // rows fetched before this push would be stale
    prefetch_.reset();
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
}

std::uint64_t RemoteEmbeddingStore::step() const {
  std::lock_guard lock(mutex_);
  return step_;
}

void RemoteEmbeddingStore::set_step(std::uint64_t step) {
  std::lock_guard lock(mutex_);
  step_ = step;
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
