#include "models/model.h"

namespace aiacc::models {

ModelRegistry& model_registry() {
  static ModelRegistry registry("model type");
  return registry;
}

}  // namespace aiacc::models
