// Test helpers for ps/: in-process shards on loopback (threads of the test), a client to them,
// table configs, and a single-process reference (LocalEmbeddingStore) fed the same requests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/embedding/local_embedding_store.h"
#include "core/kernels/dedup.h"
#include "core/util/random.h"
#include "ps/client.h"
#include "ps/server.h"

namespace aiacc::ps::testing {

struct Cluster {
  std::vector<std::unique_ptr<PsServer>> servers;

  explicit Cluster(int num_shards, ServerOptions base = {}) {
    base.num_shards = num_shards;
    base.log_interval_s = 0;
    for (int k = 0; k < num_shards; ++k) {
      base.shard = k;
      servers.push_back(std::make_unique<PsServer>(base));
    }
  }
  std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (const auto& s : servers) out.push_back(s->endpoint());
    return out;
  }
  std::shared_ptr<PsClient> client(int worker = 0, ClientOptions options = {}) const {
    options.endpoints = endpoints();
    options.worker = worker;
    if (options.timeout_s == ClientOptions{}.timeout_s) options.timeout_s = 60.0;
    return std::make_shared<PsClient>(options);
  }
};

inline TableConfig table_config(const std::string& name, int dim, const std::string& optimizer,
                                const std::string& consistency = "async", int num_workers = 1) {
  TableConfig c;
  c.spec.name = name;
  c.spec.dim = dim;
  c.spec.init_scale = 0.1;
  c.spec.seed = 42;
  c.optimizer.type = optimizer;
  c.optimizer.lr = 0.05;
  c.optimizer.l1 = optimizer == "ftrl" ? 0.01 : 0.0;
  c.options.consistency = consistency;
  c.options.num_workers = num_workers;
  return c;
}

// Random ids in [0, range) (duplicates likely when count is near range) and gradients.
inline std::vector<std::int64_t> random_ids(std::size_t count, std::int64_t range, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::int64_t> ids(count);
  for (auto& id : ids) id = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(range))) * 7919 - 1000;
  return ids;
}
inline std::vector<float> random_grads(std::size_t count, int dim, std::uint64_t seed) {
  Rng rng(seed, 1);
  std::vector<float> g(count * static_cast<std::size_t>(dim));
  for (auto& v : g) v = static_cast<float>(rng.uniform(-1.0, 1.0));
  return g;
}

// What the client sends for a push: repeated ids' rows summed in request order.
inline void aggregate(const std::vector<std::int64_t>& ids, const std::vector<float>& grads, int dim,
                      std::vector<std::int64_t>& unique, std::vector<float>& summed) {
  kernels::DedupResult d = kernels::deduplicate_ids(ids);
  unique = d.unique_ids;
  const auto dd = static_cast<std::size_t>(dim);
  summed.assign(unique.size() * dd, 0.0f);
  for (std::size_t p = 0; p < ids.size(); ++p) {
    for (std::size_t j = 0; j < dd; ++j) {
      summed[static_cast<std::size_t>(d.inverse[p]) * dd + j] += grads[p * dd + j];
    }
  }
}

inline std::unique_ptr<LocalEmbeddingStore> reference_store(const TableConfig& c) {
  return std::make_unique<LocalEmbeddingStore>(c.spec, c.optimizer);
}

}  // namespace aiacc::ps::testing
