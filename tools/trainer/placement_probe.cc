#include "tools/trainer/placement_probe.h"

#include <memory>
#include <vector>

#include "core/embedding/local_embedding_store.h"

namespace aiacc::trainer {

void ProbeCounter::add(std::span<const std::int64_t> ids) { batch_.insert(ids.begin(), ids.end()); }

void ProbeCounter::end_batch() {
  unique_total_ += static_cast<std::int64_t>(batch_.size());
  new_last_ = 0;
  for (auto id : batch_) new_last_ += ++batches_of_[id] == 1 ? 1 : 0;
  batch_.clear();
  ++batches_;
}

void ProbeCounter::fill(TableProbe& probe) const {
  probe.unique_rows_per_step = batches_ ? static_cast<double>(unique_total_) / static_cast<double>(batches_) : 0;
  probe.rows_seen = static_cast<std::int64_t>(batches_of_.size());
  probe.new_rows_last_batch = new_last_;
  probe.rows_in_one_batch = probe.rows_in_two_batches = 0;
  for (const auto& [id, batches] : batches_of_) {
    probe.rows_in_one_batch += batches == 1 ? 1 : 0;
    probe.rows_in_two_batches += batches == 2 ? 1 : 0;
  }
  probe.probe_batches = batches_;
}

namespace {

// A local store that counts what the placement probe's batches touch.
class ProbeStore final : public EmbeddingStore {
 public:
  ProbeStore(const EmbeddingTableSpec& spec, const optim::OptimizerOptions& optimizer)
      : inner_(spec, optimizer) {}
  const EmbeddingTableSpec& spec() const override { return inner_.spec(); }
  void pull(std::span<const std::int64_t> ids, float* rows) override {
    inner_.pull(ids, rows);
    counter_.add(ids);
  }
  void push(std::span<const std::int64_t>, const float*, double) override {}
  std::int64_t num_rows() const override { return inner_.num_rows(); }
  std::vector<std::pair<std::string, Tensor>> save_rows() const override { return {}; }
  void load_rows(const std::vector<std::pair<std::string, Tensor>>&) override {}

  void end_batch() { counter_.end_batch(); }
  TableProbe probe(std::int64_t worker_batches, std::int64_t epoch_batches) const {
    TableProbe p;
    p.dim = inner_.spec().dim;
    p.state_floats = inner_.state_floats();
    counter_.fill(p);
    p.worker_batches = worker_batches;
    p.epoch_batches = epoch_batches;
    p.max_rows = inner_.spec().max_rows;
    return p;
  }

 private:
  LocalEmbeddingStore inner_;
  ProbeCounter counter_;
};

}  // namespace

std::map<std::string, TableProbe> probe_tables(const models::ModelOptions& model,
                                               const models::ModelContext& context,
                                               const optim::OptimizerOptions& sparse_optimizer,
                                               const ClusterOptions& cluster, data::Loader& loader,
                                               std::int64_t worker_batches) {
  std::map<std::string, std::shared_ptr<ProbeStore>> counting;
  models::ModelContext probe_context = context;
  probe_context.embedding_stores = [&](const EmbeddingTableSpec& spec) -> std::shared_ptr<EmbeddingStore> {
    auto store = std::make_shared<ProbeStore>(spec, sparse_optimizer);
    counting[spec.name] = store;
    return store;
  };
  auto probe_model = models::make_model(model, probe_context);
  std::vector<std::string> names;
  for (const auto& [name, store] : counting) names.push_back(name);
  if (needs_probe(cluster, names)) {
    loader.start_epoch(0);
    for (int b = 0; b < cluster.placement_probe_batches; ++b) {
      auto batch = loader.next();
      if (!batch) break;
      probe_model->forward(*batch, /*training=*/false);
      for (auto& [name, store] : counting) store->end_batch();
    }
  }
  std::map<std::string, TableProbe> probes;
  for (const auto& [name, store] : counting) probes[name] = store->probe(worker_batches, loader.batches_per_epoch());
  return probes;
}

}  // namespace aiacc::trainer
