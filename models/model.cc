#include "models/model.h"

namespace aiacc::models {

ModelRegistry& model_registry() {
  static ModelRegistry registry("model type");
  return registry;
}

std::unique_ptr<Model> make_model(const ModelOptions& options, const ModelContext& context) {
  return model_registry().create(options.type, options.options.block(options.type), context);
}

}  // namespace aiacc::models
