#include "tools/trainer/placement_probe.h"

#include <memory>
#include <unordered_set>
#include <vector>

#include "core/embedding/local_embedding_store.h"

namespace aiacc::trainer {

namespace {

// A local store that counts what the placement probe's batches touch.
class ProbeStore final : public EmbeddingStore {
 public:
  ProbeStore(const EmbeddingTableSpec& spec, const optim::OptimizerOptions& optimizer)
      : inner_(spec, optimizer) {}
  const EmbeddingTableSpec& spec() const override { return inner_.spec(); }
  void pull(std::span<const std::int64_t> ids, float* rows) override {
    inner_.pull(ids, rows);
    std::unordered_set<std::int64_t> unique(ids.begin(), ids.end());
    unique_this_batch_ += static_cast<std::int64_t>(unique.size());
    for (auto id : unique) new_this_batch_ += seen_.insert(id).second ? 1 : 0;
  }
  void push(std::span<const std::int64_t>, const float*, double) override {}
  std::int64_t num_rows() const override { return inner_.num_rows(); }
  std::vector<std::pair<std::string, Tensor>> save_rows() const override { return {}; }
  void load_rows(const std::vector<std::pair<std::string, Tensor>>&) override {}

  void end_batch() {
    unique_total_ += unique_this_batch_;
    new_last_ = new_this_batch_;
    ++batches_;
    unique_this_batch_ = new_this_batch_ = 0;
  }
  TableProbe probe(std::int64_t total_steps) const {
    TableProbe p;
    p.dim = inner_.spec().dim;
    p.state_floats = inner_.state_floats();
    p.unique_rows_per_step = batches_ ? static_cast<double>(unique_total_) / static_cast<double>(batches_) : 0;
    p.rows_seen = static_cast<std::int64_t>(seen_.size());
    p.new_rows_last_batch = new_last_;
    p.probe_batches = batches_;
    p.total_steps = total_steps;
    return p;
  }

 private:
  LocalEmbeddingStore inner_;
  std::unordered_set<std::int64_t> seen_;
  std::int64_t unique_this_batch_ = 0, new_this_batch_ = 0, unique_total_ = 0, new_last_ = 0,
               batches_ = 0;
};

}  // namespace

std::map<std::string, TableProbe> probe_tables(const models::ModelOptions& model,
                                               const models::ModelContext& context,
                                               const optim::OptimizerOptions& sparse_optimizer,
                                               const ClusterOptions& cluster, data::Loader& loader,
                                               std::int64_t total_steps) {
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
  for (const auto& [name, store] : counting) probes[name] = store->probe(total_steps);
  return probes;
}

}  // namespace aiacc::trainer
