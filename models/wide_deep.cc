// "wide_deep": construction (tables from the context's store factory, MLP), forward and backward
// of Wide & Deep (see models/wide_deep_model.h), and its registration.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/device_ops.h"
#include "core/error.h"
#include "core/kernels/concat.h"
#include "core/log.h"
#include "core/util/random.h"
#include "models/layers/activation.h"
#include "models/layers/dropout.h"
#include "models/wide_deep_model.h"

namespace aiacc::models {
namespace {

// Seeds the MLP's layers apart from the Linear of the wide part.
constexpr std::uint64_t kWideDenseSeed = 0x77696465;  // "wide"

std::unique_ptr<SparseEmbedding> make_table(const ModelContext& context, const std::string& name,
                                            std::int64_t dim, double init_scale,
                                            kernels::BagMode mode, std::int64_t hash_buckets) {
  // Each table's initial rows depend on the job seed and the table's name only. Folded ids
  // bound the rows, which auto placement takes as the most a replica can hold.
  const EmbeddingTableSpec spec{name, dim, init_scale,
                                mix64(context.seed ^ FeatureHasher::salt_of(name)), hash_buckets};
  std::shared_ptr<EmbeddingStore> store = context.embedding_stores(spec);
  if (!store) throw ConfigError(fmt::format("model wide_deep: no embedding store for table {}", name));
  if (store->spec().name != name || store->spec().dim != dim) {
    throw ConfigError(fmt::format("model wide_deep: the store for table {} (dim {}) serves table "
                                  "{} (dim {})",
                                  name, dim, store->spec().name, store->spec().dim));
  }
  return std::make_unique<SparseEmbedding>(std::move(store), mode, context.dtype);
}

}  // namespace

void WideDeep::Options::validate(const config::Node& node) const {
  if (!wide && !deep) node.child("deep").fail("wide and deep are both false: nothing to train");
}

WideDeep::WideDeep(const Options& options, const ModelContext& context)
    : dtype_(context.dtype),
      dropout_(options.dropout),
      num_int_(context.input.example_shape.numel()),
      wide_(options.wide),
      deep_(options.deep),
      hasher_(context.input.sparse_fields,
              parse_cross_features(options.cross_features, context.input.sparse_fields),
              static_cast<std::uint64_t>(options.hash_buckets)),
      bags_on_device_(options.embedding_bags == "device"),
      bag_mode_(options.pooling == "mean" ? kernels::BagMode::mean : kernels::BagMode::sum),
      device_row_cache_(options.device_row_cache) {
  const std::vector<std::string>& fields = context.input.sparse_fields;
  if (context.input.task != Task::binary) {
    throw ConfigError("model wide_deep: needs a binary (CTR) data set, e.g. criteo_tsv or synthetic_ctr");
  }
  if (fields.empty()) throw ConfigError("model wide_deep: the data has no categorical fields");
  if (!context.embedding_stores) {
    throw ConfigError("model wide_deep: needs embedding stores for its sparse tables (the trainer "
                      "provides them; none was given)");
  }
  if (!wide_ && !deep_) throw ConfigError("model wide_deep: wide and deep are both false");
  if (dtype_ != DType::f32 && dtype_ != DType::f64) {
    throw ConfigError(fmt::format("model wide_deep: dtype {} (f32 or f64)", dtype_name(dtype_)));
  }
  const kernels::BagMode mode = bag_mode_;

  if (wide_) {
    for (const std::string& field : fields) {
      wide_fields_.push_back(
          make_table(context, "wide." + field, 1, options.wide_init_scale, mode, options.hash_buckets));
      params_.push_back(&wide_fields_.back()->parameter());
    }
    for (const CrossFeature& cross : hasher_.crosses()) {
      wide_crosses_.push_back(
          make_table(context, "wide." + cross.name, 1, options.wide_init_scale, mode, options.hash_buckets));
      params_.push_back(&wide_crosses_.back()->parameter());
    }
    if (options.wide_dense && num_int_ > 0) {
      wide_dense_ = std::make_unique<Linear>("wide.dense", num_int_, 1, /*bias=*/false,
                                             context.seed + kWideDenseSeed, dtype_);
      params_.push_back(&wide_dense_->weight());
    }
    wide_bias_ = std::make_unique<Parameter>("wide.bias", Tensor::zeros(Shape{1}, dtype_));
    wide_bias_->set_decays(false);
    params_.push_back(wide_bias_.get());
  } else if (!hasher_.crosses().empty()) {
    throw ConfigError("model wide_deep: cross_features belong to the wide part, which is off");
  }

  if (deep_) {
    for (const std::string& field : fields) {
      deep_fields_.push_back(
          make_table(context, "deep." + field, options.embedding_dim, options.init_scale, mode,
                     options.hash_buckets));
      params_.push_back(&deep_fields_.back()->parameter());
    }
    mlp_ = std::make_unique<Sequential>("deep");
    std::int64_t width = static_cast<std::int64_t>(fields.size()) * options.embedding_dim + num_int_;
    int index = 1;
    for (std::int64_t units : options.hidden) {
      mlp_->add(std::make_unique<Linear>(fmt::format("deep.fc{}", index), width, units, true,
                                         context.seed + index, dtype_));
      mlp_->add(std::make_unique<ReLU>(fmt::format("deep.relu{}", index)));
      if (options.dropout > 0) {
        mlp_->add(std::make_unique<Dropout>(fmt::format("deep.dropout{}", index), options.dropout,
                                            context.seed + 1000 + index));
      }
      width = units;
      ++index;
    }
    mlp_->add(std::make_unique<Linear>(fmt::format("deep.fc{}", index), width, 1, true,
                                       context.seed + index, dtype_));
    for (Parameter* p : mlp_->parameters()) params_.push_back(p);
  }
}

WideDeep::~WideDeep() {
  if (device_slots_.defined() && device_rows_.pulled > 0) {
    log::get("model")->info("wide_deep: device row cache of {} rows: {} of the {} deep-table rows the steps "
                            "pulled were copied to the device ({:.1f}%)",
                            device_slots_.dim(0), device_rows_.copied, device_rows_.pulled,
                            100.0 * static_cast<double>(device_rows_.copied) / static_cast<double>(device_rows_.pulled));
  }
}

void WideDeep::to(Device device, const ActivationFormat& format) {
  if (!format.is_default()) {
    throw ConfigError(fmt::format("job.precision: wide_deep trains in f32 only (activations {} asked; mixed "
                                  "precision is for the resnet model)", format.str()));
  }
  if (device.is_cpu()) return;
  if (dtype_ != DType::f32) throw ConfigError(fmt::format("model wide_deep on {}: f32 only", device.str()));
  if (dropout_ > 0) {
    throw ConfigError(fmt::format("job.device: {}: model.wide_deep.dropout {} runs on the CPU only (set 0)",
                                  device.str(), dropout_));
  }
  if (mlp_) mlp_->to(device);
  if (wide_dense_) wide_dense_->to(device);
  if (wide_bias_) wide_bias_->to(device);
  device_ = device;
  device_row_cache_planned_ = false;
  device_slots_ = Tensor();
}

Tensor WideDeep::dense_input(const Batch& batch, std::int64_t n) const {
  if (num_int_ == 0) return Tensor::zeros(Shape{n, 0}, dtype_);
  if (!batch.inputs.defined() || batch.inputs.numel() != n * num_int_ || batch.inputs.dim(0) != n) {
    throw DataError(fmt::format("model wide_deep: expected integer features [{}, {}], got {}", n,
                                num_int_, batch.inputs.defined() ? batch.inputs.shape().str() : "none"));
  }
  // A job on a device hands the batch over there; the features meet the pooled rows on the host.
  Tensor x = batch.inputs.reshape(Shape{n, num_int_});
  if (!x.device().is_cpu()) x = x.to(Device::cpu());
  return x.dtype() == dtype_ ? x : x.to(dtype_);
}

std::vector<std::pair<std::string, std::vector<std::int64_t>>> WideDeep::embedding_ids(const Batch& batch) {
  std::vector<SparseField> ids, cross_ids;
  hasher_.hash(batch.sparse, batch.size(), ids, cross_ids);
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
  kernels::IdDeduplicator deduplicator;
  kernels::DedupResult unique;
  // The same de-duplication SparseEmbedding::forward runs before its pull.
  auto add = [&](SparseEmbedding& table, const SparseField& field) {
    deduplicator.run(field.ids, unique);
    out.emplace_back(table.parameter().name(), unique.unique_ids);
  };
  if (wide_) {
    for (std::size_t f = 0; f < wide_fields_.size(); ++f) add(*wide_fields_[f], ids[f]);
    for (std::size_t c = 0; c < wide_crosses_.size(); ++c) add(*wide_crosses_[c], cross_ids[c]);
  }
  if (deep_) {
    for (std::size_t f = 0; f < deep_fields_.size(); ++f) add(*deep_fields_[f], ids[f]);
  }
  return out;
}

WideDeep::DeepInputShape WideDeep::deep_input_shape() const {
  const std::int64_t dim = deep_fields_.front()->dim();
  const auto fields = static_cast<std::int64_t>(deep_fields_.size());
  return {batch_, dim, fields, fields * dim + num_int_};
}

void WideDeep::plan_device_row_cache() {
  for (DeviceBag& bag : device_bags_) bag.slot_base = -1;
  std::vector<std::int64_t> bases(deep_fields_.size(), -1);
  std::int64_t slots = 0;
  for (std::size_t f = 0; device_row_cache_ && f < deep_fields_.size(); ++f) {
    const std::int64_t table_slots = deep_fields_[f]->store().cache_slots();
    if (table_slots > 0) bases[f] = slots;
    slots += table_slots;
  }
  if (slots > 0) {
    const std::int64_t dim = deep_input_shape().dim;
    try {
      device_slots_ = Tensor::empty(Shape{slots, dim}, DType::f32, device_);
    } catch (const Error& e) {
      throw ConfigError(fmt::format(
          "model.wide_deep.device_row_cache: the GPU mirror of the deep tables' hot-row caches ({} rows of {} "
          "floats, {:.2f} GiB) does not fit on {}: {} (lower cluster.ps.cache_rows, or set "
          "model.wide_deep.device_row_cache: false to copy each step's rows instead)",
          slots, dim, static_cast<double>(slots * dim * 4) / (1 << 30), device_.str(), e.what()));
    }
    for (std::size_t f = 0; f < deep_fields_.size(); ++f) device_bags_[f].slot_base = bases[f];
  }
  // The first step copies every slot over, whatever the stores listed before (a second to(),
  // or takes of a step that failed).
  device_slots_resync_ = true;
  device_row_cache_planned_ = true;
}

Tensor WideDeep::deep_input_on_device(const Tensor& ints, bool training) {
  device_bags_.resize(deep_fields_.size());
  if (!device_row_cache_planned_) plan_device_row_cache();
  try {
    return build_deep_input_on_device(ints, training);
  } catch (...) {
    // Rows taken from the stores may not have reached the mirror: the next step sends them all.
    device_slots_resync_ = true;
    throw;
  }
}

Tensor WideDeep::build_deep_input_on_device(const Tensor& ints, bool training) {
  const DeepInputShape shape = deep_input_shape();
  const std::int64_t n = shape.batch, dim = shape.dim;

  // Pull each field's unique rows and lay out where its arrays go in the two blocks (the
  // backward's plans only for a training step). A mirrored table sends the rows its cache
  // received instead of its unique rows, and its forward reads the mirror's slots.
  written_slots_.clear();
  written_rows_.clear();
  std::int64_t floats = 0, ids = 0, grads = 0;
  for (std::size_t f = 0; f < deep_fields_.size(); ++f) {
    SparseEmbedding& table = *deep_fields_[f];
    table.pull(ids_[f]);
    DeviceBag& bag = device_bags_[f];
    const auto positions = static_cast<std::int64_t>(table.unique_indices().size());
    const std::int64_t unique = table.num_unique();
    bag.geometry = {n, positions, unique, dim};
    bag.grad_at = grads;
    grads += unique * dim;
    device_rows_.pulled += unique;
    bag.from_slots = false;
    if (bag.slot_base >= 0) {
      written_scratch_.clear();
      bag.from_slots =
          table.store().take_cache_slots(bag.slot_of, written_scratch_, written_rows_, device_slots_resync_);
      AIACC_CHECK((bag.from_slots || !training) && (!bag.from_slots || static_cast<std::int64_t>(bag.slot_of.size()) == unique),
                  "model wide_deep: table {} gave {} cache slots for {} pulled rows", table.parameter().name(),
                  bag.slot_of.size(), unique);
      for (const std::int32_t slot : written_scratch_) written_slots_.push_back(bag.slot_base + slot);
    }
    if (!bag.from_slots) {
      bag.rows_at = floats;
      floats += unique * dim;
      device_rows_.copied += unique;
    }
    bag.indices_at = ids;
    bag.offsets_at = bag.indices_at + positions;
    bag.row_start_at = bag.offsets_at + n + 1;
    bag.bag_of_at = bag.row_start_at + (training ? unique + 1 : 0);
    ids = bag.bag_of_at + (training ? positions : 0);
  }
  device_bags_trainable_ = training;
  const auto written = static_cast<std::int64_t>(written_slots_.size());
  device_rows_.copied += written;
  const std::int64_t written_rows_at = floats;
  const std::int64_t ints_at = written_rows_at + written * dim;
  const std::int64_t written_slots_at = ids;
  Tensor host_floats = Tensor::empty(Shape{ints_at + n * num_int_}, DType::f32);
  Tensor host_ids = Tensor::empty(Shape{written_slots_at + written}, DType::i64);
  float* fp = host_floats.data<float>();
  std::int64_t* ip = host_ids.data<std::int64_t>();
  for (std::size_t f = 0; f < deep_fields_.size(); ++f) {
    SparseEmbedding& table = *deep_fields_[f];
    const DeviceBag& bag = device_bags_[f];
    const std::vector<std::int64_t>& unique_indices = table.unique_indices();
    if (bag.from_slots) {
      std::int64_t* indices = ip + bag.indices_at;
      for (std::size_t p = 0; p < unique_indices.size(); ++p) {
        indices[p] = bag.slot_base + bag.slot_of[static_cast<std::size_t>(unique_indices[p])];
      }
    } else {
      const Tensor& rows = table.parameter().value();
      std::copy_n(rows.data<float>(), rows.numel(), fp + bag.rows_at);
      std::copy(unique_indices.begin(), unique_indices.end(), ip + bag.indices_at);
    }
    std::copy(table.offsets().begin(), table.offsets().end(), ip + bag.offsets_at);
    if (!training) continue;
    // The backward's plan is made here, on the host, and travels with the forward's arrays.
    const kernels::EmbeddingBagBackwardPlan plan =
        kernels::make_backward_plan(bag.geometry, unique_indices.data(), table.offsets().data());
    std::copy(plan.row_start.begin(), plan.row_start.end(), ip + bag.row_start_at);
    std::copy(plan.bag_of.begin(), plan.bag_of.end(), ip + bag.bag_of_at);
  }
  std::copy(written_rows_.begin(), written_rows_.end(), fp + written_rows_at);
  std::copy(written_slots_.begin(), written_slots_.end(), ip + written_slots_at);
  if (num_int_ > 0) std::copy_n(ints.data<float>(), n * num_int_, fp + ints_at);

  // Two copies (through pinned staging; the host goes on while they run), then the written
  // rows go into their slots, the bags write their columns of the MLP's input and the integers
  // fill the last ones. The rows' block may go when this returns (the device allocator reuses
  // it only after the queued kernels); the ids' block stays for the backward.
  const Tensor device_floats = host_floats.to(device_);
  device_ids_ = host_ids.to(device_);
  Tensor input = Tensor::empty(Shape{n, shape.width}, DType::f32, device_);
  DeviceOps& ops = device_ops(device_);
  const float* dev_floats = device_floats.data<float>();
  const std::int64_t* dev_ids = device_ids_.data<std::int64_t>();
  float* out = input.data<float>();
  if (written > 0) {
    ops.scatter_rows(device_, written, dim, dev_floats + written_rows_at, dev_ids + written_slots_at,
                     device_slots_.data<float>());
  }
  // Only a forward that took the slots (an evaluation's read-only pulls do not) has resynced
  // the mirror: until one does, the next must still list every slot.
  const bool took_slots = std::any_of(device_bags_.begin(), device_bags_.end(), [](const DeviceBag& b) { return b.from_slots; });
  if (device_slots_.defined() && took_slots && std::exchange(device_slots_resync_, false)) {
    // The staging of a whole mirror is not kept for the steps' few rows.
    std::vector<float>().swap(written_rows_);
    std::vector<std::int64_t>().swap(written_slots_);
  }
  for (std::size_t f = 0; f < device_bags_.size(); ++f) {
    const DeviceBag& bag = device_bags_[f];
    kernels::EmbeddingBagGeometry geometry = bag.geometry;
    const float* rows = dev_floats + bag.rows_at;
    if (bag.from_slots) {  // the indices point into all of the mirror's rows
      geometry.num_unique = device_slots_.dim(0);
      rows = device_slots_.data<float>();
    }
    ops.embedding_bag_forward(device_, geometry, bag_mode_, rows, dev_ids + bag.indices_at, dev_ids + bag.offsets_at,
                              out + static_cast<std::int64_t>(f) * dim, shape.width);
  }
  if (num_int_ > 0) {
    ops.copy_columns(device_, n, num_int_, dev_floats + ints_at, num_int_, out + shape.fields * dim, shape.width);
  }
  return input;
}

Tensor WideDeep::deep_backward_on_device(const Tensor& dinput) {
  AIACC_CHECK(device_bags_trainable_, "model wide_deep: backward() after an evaluation forward()");
  const DeepInputShape shape = deep_input_shape();
  const std::int64_t n = shape.batch, dim = shape.dim;
  std::int64_t unique_rows = 0;
  for (const DeviceBag& bag : device_bags_) unique_rows += bag.geometry.num_unique;
  Tensor grad_rows = Tensor::empty(Shape{unique_rows, dim}, DType::f32, device_);
  DeviceOps& ops = device_ops(device_);
  const std::int64_t* dev_ids = device_ids_.data<std::int64_t>();
  const float* dx = dinput.data<float>();
  for (std::size_t f = 0; f < device_bags_.size(); ++f) {
    const DeviceBag& bag = device_bags_[f];
    ops.embedding_bag_backward(device_, bag.geometry, bag_mode_, dx + static_cast<std::int64_t>(f) * dim,
                               shape.width, dev_ids + bag.row_start_at, dev_ids + bag.bag_of_at,
                               dev_ids + bag.offsets_at, grad_rows.data<float>() + bag.grad_at);
  }
  // One copy back for every table's rows; each table then hands its rows (a view of them) to
  // the trainer.
  const Tensor host_rows = grad_rows.to(Device::cpu());
  for (std::size_t f = 0; f < deep_fields_.size(); ++f) {
    const DeviceBag& bag = device_bags_[f];
    const std::int64_t first = bag.grad_at / dim;
    deep_fields_[f]->set_gradient_rows(host_rows.rows(first, first + bag.geometry.num_unique));
  }
  // The integer features' gradient only for gradient checks (compute_input_grad_).
  if (num_int_ == 0 || !compute_input_grad_) return Tensor();
  Tensor dints = Tensor::empty(Shape{n, num_int_}, DType::f32, device_);
  ops.copy_columns(device_, n, num_int_, dx + shape.fields * dim, shape.width, dints.data<float>(), num_int_);
  return dints.to(Device::cpu());
}

double WideDeep::forward(const Batch& batch, bool training) {
  const std::int64_t n = batch.size();
  if (n < 1) throw DataError("model wide_deep: empty batch");
  batch_ = n;
  hasher_.hash(batch.sparse, n, ids_, cross_ids_);
  const Tensor ints = dense_input(batch, n);

  logits_ = Tensor::zeros(Shape{n}, dtype_);
  auto accumulate = [&](const Tensor& column) {  // logits += column ([N, 1] or [N])
    if (dtype_ == DType::f64) {
      const double* c = column.data<double>();
      double* out = logits_.data<double>();
      for (std::int64_t i = 0; i < n; ++i) out[i] += c[i];
    } else {
      const float* c = column.data<float>();
      float* out = logits_.data<float>();
      for (std::int64_t i = 0; i < n; ++i) out[i] += c[i];
    }
  };

  // The dense part's inputs go to its device and its [N, 1] outputs come back, so the logits
  // sum in the same order on every device (a device job equals the CPU job on the fake device).
  const bool on_device = !device_.is_cpu();
  const auto dense = [&](Layer& layer, const Tensor& input) {
    return on_device ? layer.forward(input.to(device_), training).to(Device::cpu()) : layer.forward(input, training);
  };
  if (wide_) {
    const Tensor bias = on_device ? wide_bias_->value().to(Device::cpu()) : wide_bias_->value();
    logits_.fill(dtype_ == DType::f64 ? bias.data<double>()[0] : bias.data<float>()[0]);
    for (std::size_t f = 0; f < wide_fields_.size(); ++f) accumulate(wide_fields_[f]->forward(ids_[f]));
    for (std::size_t c = 0; c < wide_crosses_.size(); ++c) {
      accumulate(wide_crosses_[c]->forward(cross_ids_[c]));
    }
    if (wide_dense_) accumulate(dense(*wide_dense_, ints));
  }
  if (deep_ && on_device && bags_on_device_) {
    accumulate(mlp_->forward(deep_input_on_device(ints, training), training).to(Device::cpu()));
  } else if (deep_) {
    std::vector<Tensor> parts;
    parts.reserve(deep_fields_.size() + 1);
    for (std::size_t f = 0; f < deep_fields_.size(); ++f) parts.push_back(deep_fields_[f]->forward(ids_[f]));
    if (num_int_ > 0) parts.push_back(ints);
    accumulate(dense(*mlp_, kernels::concat_features(parts)));
  }
  const Tensor labels = batch.labels.device().is_cpu() ? batch.labels : batch.labels.to(Device::cpu());
  const Tensor targets = labels.dtype() == dtype_ ? labels : labels.to(dtype_);
  return loss_.forward(logits_, targets);
}

void WideDeep::backward() {
  const Tensor dlogits = loss_.backward().reshape(Shape{batch_, 1});
  const bool on_device = !device_.is_cpu();
  const Tensor dlogits_dense = on_device ? dlogits.to(device_) : dlogits;  // for the dense part
  Tensor dints;
  if (deep_ && on_device && bags_on_device_) {
    dints = deep_backward_on_device(mlp_->backward(dlogits_dense, /*need_input_grad=*/true));
  } else if (deep_) {
    Tensor dx = mlp_->backward(dlogits_dense, /*need_input_grad=*/true);
    if (on_device) dx = dx.to(Device::cpu());  // the rows' gradients, for the tables on the host
    std::vector<std::int64_t> widths(deep_fields_.size(), deep_fields_.front()->dim());
    if (num_int_ > 0) widths.push_back(num_int_);
    std::vector<Tensor> parts = kernels::split_features(dx, widths);
    for (std::size_t f = 0; f < deep_fields_.size(); ++f) deep_fields_[f]->backward(parts[f]);
    if (num_int_ > 0) dints = parts.back();
  }
  if (wide_) {
    // d logit / d (each wide pooled value) = 1: every wide table gets dlogits as its [N, 1].
    for (auto& table : wide_fields_) table->backward(dlogits);
    for (auto& table : wide_crosses_) table->backward(dlogits);
    if (wide_dense_) {
      Tensor d = wide_dense_->backward(dlogits_dense, compute_input_grad_);
      if (on_device && d.defined()) d = d.to(Device::cpu());
      if (compute_input_grad_) {
        if (!dints.defined()) {
          dints = d;
        } else if (dtype_ == DType::f64) {
          for (std::int64_t k = 0; k < d.numel(); ++k) dints.data<double>()[k] += d.data<double>()[k];
        } else {
          for (std::int64_t k = 0; k < d.numel(); ++k) dints.data<float>()[k] += d.data<float>()[k];
        }
      }
    }
    double sum = 0.0;
    for (std::int64_t i = 0; i < batch_; ++i) {
      sum += dtype_ == DType::f64 ? dlogits.data<double>()[i] : dlogits.data<float>()[i];
    }
    if (on_device) {
      wide_bias_->grad().copy_from(Tensor::from_vector(std::vector<float>{static_cast<float>(sum)}, Shape{1}));
    } else {
      wide_bias_->grad().fill(sum);
    }
    wide_bias_->grad_ready();
  }
  if (compute_input_grad_) {
    input_grad_ = dints.defined() ? dints : Tensor::zeros(Shape{batch_, num_int_}, dtype_);
  }
}

AIACC_REGISTER_MODEL("wide_deep", WideDeep);

}  // namespace aiacc::models
