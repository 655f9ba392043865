#include "ring/device_gradient_fuser.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "ring/detail/flat_gradients.h"

namespace aiacc::ring {
namespace {

// The device every gradient lives on (checked), before the plan is built from them.
Device common_device(const std::vector<Parameter*>& parameters) {
  if (parameters.empty()) throw ConfigError("gradient fusion on a device: no dense parameters");
  const Device device = parameters.front()->grad().device();
  for (const Parameter* p : parameters) {
    if (p->grad().device() != device || device.is_cpu()) {
      throw ConfigError(fmt::format("gradient fusion on a device: parameter '{}' is on {}, not on the device of "
                                    "'{}' ({})", p->name(), p->grad().device().str(), parameters.front()->name(),
                                    device.str()));
    }
  }
  return device;
}

}  // namespace

DeviceGradientFuser::DeviceGradientFuser(std::unique_ptr<DeviceCollective> collective,
                                         std::shared_ptr<Communicator> host, std::vector<Parameter*> parameters,
                                         std::int64_t bucket_bytes, ReduceOp op)
    : collective_(std::move(collective)),
      parameters_(std::move(parameters)),
      op_(op),
      plan_(detail::gradient_listing(parameters_), bucket_bytes) {
  const Device device = common_device(parameters_);
  // Offsets do not depend on the bucket size, but the boundaries do: the whole plan is compared.
  verify_plan(host, plan_, "gradient fusion on devices");
  flat_ = detail::bind_flat_gradients(parameters_, plan_, device);
  tensor_ready_.assign(parameters_.size(), 0);
  bucket_pending_.assign(plan_.buckets().size(), 0);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    parameters_[i]->add_grad_ready_hook([this, i](Parameter&) { on_ready(static_cast<int>(i)); });
  }
  log::get("ring")->debug("gradient fusion on {} through {}: {}", device.str(), collective_->describe(),
                          plan_.summary());
}

void DeviceGradientFuser::begin_step() {
  if (error_) std::rethrow_exception(error_);
  AIACC_CHECK(!in_step_, "begin_step twice without finish_step");
  std::fill(tensor_ready_.begin(), tensor_ready_.end(), 0);
  for (std::size_t b = 0; b < plan_.buckets().size(); ++b) {
    bucket_pending_[b] = static_cast<int>(plan_.buckets()[b].tensors.size());
  }
  next_bucket_ = 0;
  in_step_ = true;
}

void DeviceGradientFuser::on_ready(int tensor) {
  if (!in_step_ || tensor_ready_[static_cast<std::size_t>(tensor)]) return;
  tensor_ready_[static_cast<std::size_t>(tensor)] = 1;
  const PlannedTensor& slot = plan_.tensors()[static_cast<std::size_t>(tensor)];
  if (--bucket_pending_[static_cast<std::size_t>(slot.bucket)] == 0) queue_ready_buckets();
}

void DeviceGradientFuser::queue_ready_buckets() {
  try {
    while (next_bucket_ < plan_.buckets().size() && bucket_pending_[next_bucket_] == 0) {
      const PlannedBucket& bucket = plan_.buckets()[next_bucket_];
      trace::Span span("allreduce", fmt::format("queue bucket {}", next_bucket_),
                       {{"bytes", bucket.count * static_cast<std::int64_t>(sizeof(float))}});
      collective_->allreduce(flat_.data<float>() + bucket.offset, bucket.count, op_);
      ++next_bucket_;
      ++buckets_queued_;
    }
  } catch (...) {
    // Kept: the ranks' collectives are out of step now, so every later step rethrows it.
    error_ = std::current_exception();
    in_step_ = false;
    throw;
  }
}

void DeviceGradientFuser::finish_step() {
  if (error_) std::rethrow_exception(error_);
  AIACC_CHECK(in_step_, "finish_step without begin_step");
  // Gradients whose hook did not fire (parameters unused this step) join with the values they
  // hold: the reduced gradient of the last step they were used in (gradients are not zeroed).
  for (std::size_t t = 0; t < parameters_.size(); ++t) on_ready(static_cast<int>(t));
  in_step_ = false;
  AIACC_CHECK(next_bucket_ == plan_.buckets().size(), "{} of {} buckets queued at the end of the step",
              next_bucket_, plan_.buckets().size());
  try {
    {
      // The host queued backward ahead of the device: wait for it first, so the wait below is
      // the communication backward did not hide.
      trace::Span span("compute", "backward on the device");
      collective_->wait_for_compute();
    }
    const auto wait_start = net::Clock::now();
    {
      trace::Span span("allreduce", "wait for device collectives");
      collective_->synchronize();
    }
    exposed_seconds_ = net::seconds_since(wait_start);
    communication_seconds_ = collective_->take_busy_seconds();
  } catch (...) {
    error_ = std::current_exception();
    throw;
  }
}

}  // namespace aiacc::ring
