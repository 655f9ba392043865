// "wide_deep": Wide & Deep for CTR (Cheng et al. 2016). Registered in wide_deep.cc; declared here
// so tests can reach what the Model interface hides (the gradient w.r.t. the dense features).
//   wide  = bias + Linear(num_int -> 1)(ints) + sum_f wide.<f>[id] + sum_c wide.<a>_x_<b>[id]
//   deep  = MLP(concat(sum-bag deep.<f> for each field, ints))       (Linear+ReLU(+Dropout), -> 1)
//   logit = wide + deep;  loss = binary cross-entropy with logits, mean over the batch.
// Every embedding table lives in an EmbeddingStore from ModelContext::embedding_stores and shows
// up as one sparse Parameter named like its table; the model pulls in forward and never pushes.
// Legend: N = batch, F = categorical fields, I = integer features, D = embedding_dim.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config/schema.h"
#include "models/layers/linear.h"
#include "models/layers/loss.h"
#include "models/layers/sequential.h"
#include "models/layers/sparse_embedding.h"
#include "models/model.h"
#include "models/wide_deep_features.h"

namespace aiacc::models {

class WideDeep final : public Model {
 public:
  struct Options {
    std::int64_t embedding_dim = 16;
    std::vector<std::int64_t> hidden = {256, 128};
    double dropout = 0.0;
    std::vector<std::string> cross_features;
    bool wide = true;
    bool deep = true;
    double init_scale = 0.05;
    double wide_init_scale = 0.0;
    bool wide_dense = true;
    std::string pooling = "sum";
    std::int64_t hash_buckets = 0;
    std::string embedding_bags = "device";
    bool device_row_cache = true;

    template <class V>
    void visit(V& v) {
      v.field("embedding_dim", embedding_dim, "floats per row of the deep tables (deep.<field>)",
              config::in_range<std::int64_t>(1, 4096));
      v.field("hidden", hidden, "units of each hidden layer of the deep MLP, input to output",
              [](const std::vector<std::int64_t>& h) {
                for (auto units : h) if (units < 1) return std::string("expected positive unit counts");
                return std::string();
              });
      v.field("dropout", dropout, "dropout probability after each hidden layer",
              config::in_range(0.0, 0.95));
      v.field("cross_features", cross_features,
              "crossed field pairs '<a>_x_<b>' of the wide part (table wide.<a>_x_<b>)");
      v.field("wide", wide, "include the wide (linear) part; wide alone = logistic regression");
      v.field("deep", deep, "include the deep part (embeddings + MLP)");
      v.field("init_scale", init_scale, "deep rows start uniform(-init_scale, init_scale)",
              config::at_least(0.0));
      v.field("wide_init_scale", wide_init_scale,
              "wide rows start uniform(-s, s); 0: zeros, like logistic regression",
              config::at_least(0.0));
      v.field("wide_dense", wide_dense, "the integer features also feed a linear term of the wide part");
      v.field("pooling", pooling, "pooling of a multi-hot field's rows", config::one_of({"sum", "mean"}));
      v.field("hash_buckets", hash_buckets,
              "0: 64-bit ids (unbounded tables); > 0: ids folded modulo this many rows per table",
              config::at_least<std::int64_t>(0));
      v.field("embedding_bags", embedding_bags,
              "with job.device: cuda, where the deep tables' bags are pooled: device (the batch's unique rows, "
              "their bags' indices and the integer features go over, pooling and its backward run on the GPU, "
              "the unique rows' gradients come back) | host (pooled rows [N, fields x dim] go over and their "
              "gradient comes back)",
              config::one_of({"device", "host"}));
      v.field("device_row_cache", device_row_cache,
              "with embedding_bags: device and a worker-side hot-row cache (cluster.ps.cache_rows > 0), the "
              "cached rows are kept on the device too, and a step copies over only the rows fetched into the "
              "cache since the last one, not all its unique rows (device memory: cache_rows x embedding_dim "
              "floats per deep table)");
    }
    // Needs wide or deep.
    void validate(const config::Node& node) const;
  };

  // Throws ConfigError for a non-binary task, a missing embedding store factory, no categorical
  // fields, unknown cross fields, or neither wide nor deep.
  WideDeep(const Options& options, const ModelContext& context);
  // Logs what the device row cache saved, when one was used.
  ~WideDeep() override;

  std::vector<Parameter*> parameters() override { return params_; }
  // The deep MLP's buffers (dropout step counters), so checkpoints resume masks exactly.
  std::vector<std::pair<std::string, Tensor>> buffers() override {
    return mlp_ ? mlp_->buffers() : std::vector<std::pair<std::string, Tensor>>{};
  }
  // batch: inputs [N, I] f32, labels [N] f32 0/1, sparse: F fields of raw values. Throws
  // DataError for a batch of another layout.
  double forward(const Batch& batch, bool training) override;
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> embedding_ids(const Batch& batch) override;
  Tensor outputs() const override { return logits_; }  // on the host, also for a job on a device
  void backward() override;
  // On a device the dense part runs there (the deep MLP, the wide part's linear term of the
  // integer features and its bias) while the sparse tables stay in their embedding stores on
  // the host. With embedding_bags: device (the default) each step pulls the deep tables' unique
  // rows on the host and copies them to the device in one block, with the bags' indices and
  // backward plans in another (pinned staging, asynchronous), pools them there into the MLP's
  // input, and copies the unique rows' gradient [sum of U, D] back; with host, the pooled rows
  // [N, fields x dim + integers] go over and their gradient comes back. Either way the logits'
  // two device terms [N] come to the host and dlogits [N] go to the device; the loss and the
  // wide tables (one float per row) run on the host. f32 activations only; no dropout on a
  // device.
  void to(Device device, const ActivationFormat& format = {}) override;
  // The integer features meet the pooled rows on the host, and the loss runs there.
  bool batch_on_device() const override { return false; }

  // When set, backward() also computes dL/d inputs [N, I] (model dtype): for gradient checks.
  void set_compute_input_grad(bool compute) { compute_input_grad_ = compute; }
  const Tensor& input_grad() const { return input_grad_; }
  const FeatureHasher& hasher() const { return hasher_; }

  // Rows of the deep tables the device steps pulled, and rows they copied to the device: with
  // the device row cache the second counts the cache's written slots, not the pulled rows.
  struct DeviceRowCounts {
    std::int64_t pulled = 0, copied = 0;
  };
  DeviceRowCounts device_row_counts() const { return device_rows_; }

 private:
  Tensor dense_input(const Batch& batch, std::int64_t n) const;
  // The deep MLP's input [N, fields x dim + integers] built on the device from the pulled
  // unique rows (embedding_bags: device), and the deep tables' backward from its gradient.
  Tensor deep_input_on_device(const Tensor& ints, bool training);
  Tensor build_deep_input_on_device(const Tensor& ints, bool training);  // its work, without the resync
  Tensor deep_backward_on_device(const Tensor& dinput);
  struct DeepInputShape {
    std::int64_t batch, dim, fields, width;  // width = fields x dim + integers
  };
  DeepInputShape deep_input_shape() const;

  // Where each deep field's arrays sit in the step's two device blocks (embedding_bags: device).
  struct DeviceBag {
    kernels::EmbeddingBagGeometry geometry;
    std::int64_t rows_at = 0;  // first float of its unique rows in the rows' block (not mirrored)
    std::int64_t grad_at = 0;  // first float of their gradient in the gradient block
    std::int64_t indices_at = 0, offsets_at = 0, row_start_at = 0, bag_of_at = 0;  // in device_ids_
    // Device row cache: the table's first row in device_slots_ (-1: not mirrored), and the slot
    // of each unique row this step. The forward's indices then point into device_slots_.
    std::int64_t slot_base = -1;
    std::vector<std::int32_t> slot_of;
    // This forward reads the mirror's slots (a mirrored table whose store served the pull from
    // its cache; an evaluation's read-only pull bypasses it, and its rows are copied instead).
    bool from_slots = false;
  };
  // At the first device step: which deep tables' caches are mirrored, and their slots.
  void plan_device_row_cache();

  DType dtype_;
  double dropout_;
  std::int64_t num_int_;
  bool wide_;
  bool deep_;
  FeatureHasher hasher_;
  std::vector<std::unique_ptr<SparseEmbedding>> wide_fields_;   // [F]
  std::vector<std::unique_ptr<SparseEmbedding>> wide_crosses_;  // one per cross
  std::unique_ptr<Linear> wide_dense_;                          // null without I or wide_dense
  std::unique_ptr<Parameter> wide_bias_;                        // [1]
  std::vector<std::unique_ptr<SparseEmbedding>> deep_fields_;   // [F]
  std::unique_ptr<Sequential> mlp_;
  std::vector<Parameter*> params_;
  BinaryCrossEntropyWithLogits loss_;
  bool compute_input_grad_ = false;
  bool bags_on_device_;  // embedding_bags: device (used when device_ is not the CPU)
  kernels::BagMode bag_mode_;
  std::vector<DeviceBag> device_bags_;
  Tensor device_ids_;  // this step's indices, offsets and (training) backward plans, i64
  bool device_bags_trainable_ = false;  // the last forward was a training one (plans sent)
  bool device_row_cache_;               // options.device_row_cache
  bool device_row_cache_planned_ = false;
  Tensor device_slots_;  // [mirrored tables' cache slots, D] f32 on the device
  // The next step copies every slot of the mirrored tables: the mirror is new, or a step
  // failed between taking the stores' written slots and queueing their copy.
  bool device_slots_resync_ = true;
  std::vector<std::int32_t> written_scratch_;    // one table's written slots, from its store
  std::vector<std::int64_t> written_slots_;      // this step's, as rows of device_slots_
  std::vector<float> written_rows_;              // [written, D]
  DeviceRowCounts device_rows_;

  // The last forward's batch size, hashed ids and logits [N].
  std::int64_t batch_ = 0;
  std::vector<SparseField> ids_;
  std::vector<SparseField> cross_ids_;
  Tensor logits_;
  Device device_;  // of the dense part
  Tensor input_grad_;
};

}  // namespace aiacc::models
