#include "models/model.h"

namespace aiacc::models {

ModelRegistry& model_registry() {
  static ModelRegistry registry("model type");
  return registry;
}

std::vector<UnusedModelOptions> unused_model_options(const ModelOptions& options) {
  std::vector<UnusedModelOptions> unused;
  for (const auto& [name, block] : options.options.blocks) {
    if (name == options.type) continue;
    UnusedModelOptions entry{block.where(), {}};
    for (const auto& key : block.keys()) entry.keys.push_back(config::join_path(block.path(), key));
    if (entry.keys.empty()) entry.keys.push_back(block.path());
    unused.push_back(std::move(entry));
  }
  return unused;
}

std::unique_ptr<Model> make_model(const ModelOptions& options, const ModelContext& context) {
  return model_registry().create(options.type, options.options.block(options.type), context);
}

}  // namespace aiacc::models
