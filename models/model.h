// The Model interface and its registry: the extension point for users. A model owns its layers
// and loss, exposes its Parameters, and fires each parameter's grad_ready() during backward.
//
// Adding a model (in models/ or in a file of your own linked into the program):
//   class MyNet : public aiacc::models::Model {
//    public:
//     struct Options { int hidden = 64;
//       template <class V> void visit(V& v) { v.field("hidden", hidden, "hidden units"); } };
//     MyNet(const Options& options, const aiacc::models::ModelContext& context);
//     ...
//   };
//   AIACC_REGISTER_MODEL("my_net", MyNet);
// and select it with `model: {type: my_net, my_net: {hidden: 128}}`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/batch.h"
#include "core/device_ops.h"
#include "core/embedding/embedding_store.h"
#include "core/error.h"
#include "core/parameter.h"
#include "core/registry.h"
#include "core/tensor.h"

namespace aiacc::models {

// What a model is built for.
struct ModelContext {
  InputSpec input;
  std::uint64_t seed = 0;     // parameter initialisation seed (same on every rank)
  DType dtype = DType::f32;   // f64 for gradient checks of whole models
  // Serves the model's sparse embedding tables (local or parameter servers, chosen by the
  // trainer per table). Models with sparse tables require it.
  EmbeddingStoreFactory embedding_stores;
  // Data-parallel training with synchronised batch norm: sums a vector over all replicas (see
  // BatchNorm::set_cross_replica_sum). Empty: batch statistics are this process's own.
  std::function<void(std::span<double>)> cross_replica_sum;
};

class Model {
 public:
  virtual ~Model() = default;

  // All trainable parameters, in forward order (backward fires them in roughly reverse order).
  virtual std::vector<Parameter*> parameters() = 0;

  // Runs the forward pass and the loss; returns the mean loss over the batch. Caches what
  // backward() needs. `training` selects batch-norm statistics, dropout, etc.
  virtual double forward(const Batch& batch, bool training) = 0;

  // The model's outputs of the last forward(): logits [N, classes] for classification, [N]
  // logits for binary tasks.
  virtual Tensor outputs() const = 0;

  // Differentiates the last forward()'s mean loss; overwrites every parameter's gradient and
  // fires its grad_ready() once.
  virtual void backward() = 0;

  // Moves the model's parameters and state to `device`; forward() then takes batches there
  // (inputs and labels on the device, outputs() on it too), with activations in `format`
  // (job.precision: bf16 is bf16 channels-last; parameters stay f32). ConfigError for a model
  // that does not run there or so (the default: models with embedding tables or layers without
  // device ops).
  virtual void to(Device device, const ActivationFormat& format = {}) {
    (void)format;
    if (device.is_cpu()) return;
    throw ConfigError(fmt::format("job.device: {}: this model runs on the CPU only (its layers have no "
                                  "device path yet)", device.str()));
  }

  // On a device job, whether forward() takes the batch's dense inputs and labels on the device
  // (the default: the model computes there) or on the host, as a model that joins them with rows
  // pooled on the host does (Wide&Deep): the trainer then leaves them there, sparing a copy to
  // the device and one back each step.
  virtual bool batch_on_device() const { return true; }

  // Loss scaling (fp16 mixed precision): backward() then differentiates scale * loss, so every
  // gradient comes out `scale` times larger, and the trainer divides them back. ConfigError from
  // models that do not scale (the default) for any scale other than 1.
  virtual void set_loss_scale(float scale) {
    if (scale != 1.0f) {
      throw ConfigError("job.precision: fp16 needs loss scaling, which this model does not do (use bf16, or "
                        "the resnet model)");
    }
  }

  // Non-trainable state that checkpoints must hold (batch-norm running statistics, ...),
  // as named tensors.
  virtual std::vector<std::pair<std::string, Tensor>> buffers() { return {}; }

  // The ids forward(batch) will pull from each embedding table, exactly as it will request
  // them (per table: unique, in pull order), without running the model. The trainer uses it to
  // prefetch the next batch's rows from the parameter servers while the current step finishes.
  // Models without sparse tables (or that do not say) return nothing: no prefetch.
  virtual std::vector<std::pair<std::string, std::vector<std::int64_t>>> embedding_ids(const Batch& batch) {
    (void)batch;
    return {};
  }
};

using ModelRegistry = Registry<Model, const ModelContext&>;

// The registry of every model type linked into the program (a function-local static).
ModelRegistry& model_registry();

// The job's `model:` section: the registered type and the option blocks per type.
struct ModelOptions {
  std::string type = "mlp";
  config::TypedBlocks options;

  template <class V>
  void visit(V& v) {
    v.field("type", type, "registered model type", model_registry().name_check());
    v.blocks(model_registry(), type, options, "options of model type");
  }
};

// Builds the model `options.type` with its option block. Throws ConfigError for bad options.
std::unique_ptr<Model> make_model(const ModelOptions& options, const ModelContext& context);

}  // namespace aiacc::models

#define AIACC_REGISTER_MODEL(name, Class) \
  AIACC_REGISTER(::aiacc::models::model_registry(), name, Class)
