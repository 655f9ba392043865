// The dataset registry (a function-local static, so registration order does not matter).
#include "data/dataset.h"

#include <fmt/format.h>

#include "core/error.h"

namespace aiacc::data {

DatasetRegistry& dataset_registry() {
  static DatasetRegistry registry("dataset type");
  return registry;
}

void check_split(const DatasetContext& context, const std::string& dataset) {
  if (context.split != "train" && context.split != "test") {
    throw ConfigError(fmt::format("dataset '{}': unknown split '{}'; expected train or test",
                                  dataset, context.split));
  }
}

}  // namespace aiacc::data
