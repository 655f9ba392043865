// The gradients of fused parameters as views of one flat f32 buffer laid out in ready order:
// what both fusers (GradientFuser on the host, DeviceGradientFuser on a device) set up at
// construction, so backward writes straight into the buckets.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/parameter.h"
#include "core/tensor.h"
#include "ring/bucket_plan.h"

namespace aiacc::ring::detail {

// (name, elements) of each parameter's gradient, in the given (ready) order: what a bucket plan
// is derived from. ConfigError naming the first parameter that is not a dense f32 tensor.
std::vector<std::pair<std::string, std::int64_t>> gradient_listing(const std::vector<Parameter*>& parameters);

// Allocates the flat buffer on `device` and rebinds every gradient to its slot in `layout`
// (a plan of `parameters` in that order), keeping the values. Returns the buffer, whose storage
// the gradients share from then on.
Tensor bind_flat_gradients(const std::vector<Parameter*>& parameters, const BucketPlan& layout, Device device);

}  // namespace aiacc::ring::detail
