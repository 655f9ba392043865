// CudnnConv2d: cuDNN descriptors, benchmarked algorithm choice cached per shape, and the three
// convolution directions with workspaces from the caching allocator.
#include "core/cuda/conv2d.h"

#include <fmt/format.h>

#include <optional>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/detail/cudnn_descriptors.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "core/log.h"
#include "core/util/find_once_cache.h"

namespace aiacc::cuda {
namespace {

using detail::ConvDescriptor;
using detail::FilterDescriptor;
using detail::TensorDescriptor;

enum class Direction { forward, data, weight };

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::forward: return "forward";
    case Direction::data: return "data";
    case Direction::weight: return "weight";
  }
  return "?";
}

// The algorithm a direction runs with, its workspace and the math type it was measured with.
struct Choice {
  int algo = 0;
  std::size_t workspace = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

// Process-wide: the key names the shape, dtype, layout, math, device and direction.
FindOnceCache<std::string, Choice>& chosen_algorithms() {
  static FindOnceCache<std::string, Choice> cache;
  return cache;
}

// The first successful candidate (cuDNN sorts them fastest first) within the limit.
template <class Perf>
Choice first_usable(const std::vector<Perf>& perf, int returned, std::size_t limit,
                    const std::string& what) {
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit) {
      return Choice{static_cast<int>(perf[i].algo), perf[i].memory, perf[i].mathType};
    }
  }
  throw CudaError(fmt::format("cuDNN has no {} algorithm within the {} byte workspace limit", what, limit));
}

}  // namespace

struct CudnnConv2d::Descriptors {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvDescriptor conv;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // configured: searches run under it
  std::optional<Choice> chosen[3];
};

CudnnConv2d::CudnnConv2d(const kernels::Conv2dGeometry& geometry, CudnnConvOptions options, int device)
    : geometry_(geometry), options_(options), device_(device) {
  geometry_.validate();
  constexpr const char* kLayer = "cuDNN convolution";
  const cudnnDataType_t type = detail::cudnn_type(options_.dtype, kLayer);
  DeviceGuard guard(device_);
  descriptors_ = std::make_unique<Descriptors>();
  const auto& g = geometry_;
  detail::set_4d(descriptors_->x, options_.layout, type, g.batch, g.in_channels, g.height, g.width, kLayer);
  detail::set_4d(descriptors_->y, options_.layout, type, g.batch, g.out_channels, g.out_height(), g.out_width(),
                 kLayer);
  AIACC_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
      descriptors_->w.get(), type, detail::cudnn_format(options_.layout), detail::cudnn_dim(g.out_channels, kLayer, "O"),
      detail::cudnn_dim(g.in_channels, kLayer, "C"), detail::cudnn_dim(g.kernel_h, kLayer, "KH"),
      detail::cudnn_dim(g.kernel_w, kLayer, "KW")));
  // fp32 accumulation for every storage type (fp16 too: "pseudo-half" in cuDNN's terms).
  AIACC_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      descriptors_->conv.get(), detail::cudnn_dim(g.pad_h, kLayer, "pad_h"), detail::cudnn_dim(g.pad_w, kLayer, "pad_w"),
      detail::cudnn_dim(g.stride_h, kLayer, "stride_h"), detail::cudnn_dim(g.stride_w, kLayer, "stride_w"), 1, 1,
      CUDNN_CROSS_CORRELATION,
      CUDNN_DATA_FLOAT));
  const cudnnMathType_t math = options_.dtype != DType::f32 ? CUDNN_TENSOR_OP_MATH
                               : options_.allow_tf32        ? CUDNN_DEFAULT_MATH
                                                            : CUDNN_FMA_MATH;
  descriptors_->math = math;
  AIACC_CUDNN_CHECK(cudnnSetConvolutionMathType(descriptors_->conv.get(), math));
  int n = 0, c = 0, h = 0, w = 0;
  AIACC_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(descriptors_->conv.get(), descriptors_->x.get(),
                                                          descriptors_->w.get(), &n, &c, &h, &w));
  if (n != g.batch || c != g.out_channels || h != g.out_height() || w != g.out_width()) {
    throw InternalError(fmt::format("cuDNN computes output [{}, {}, {}, {}] for {}, we expect [{}, {}, {}, {}]",
                                    n, c, h, w, g.str(), g.batch, g.out_channels, g.out_height(), g.out_width()));
  }
}

CudnnConv2d::~CudnnConv2d() = default;

namespace {

// The key of a direction's choice in the process-wide cache.
std::string choice_key(const kernels::Conv2dGeometry& g, const CudnnConvOptions& o, int device, Direction d) {
  return fmt::format("{} {} {} tf32={} ws={} cuda:{} {}", g.str(), dtype_name(o.dtype),
                     layout_name(o.layout), o.allow_tf32, o.workspace_limit,
                     device, direction_name(d));
}

// A workspace for benchmarking: the limit, or none when the device cannot spare it now.
memory::PooledBuffer find_workspace(int device, std::size_t limit, cudaStream_t stream) {
  if (limit == 0) return {};
  try {
    return memory::PooledBuffer(device_allocator(device), limit, stream_id(stream));
  } catch (const OutOfMemoryError& e) {
    log::get("cuda")->warn("cuDNN algorithm search without a workspace: {}", e.what());
    return {};
  }
}

}  // namespace

namespace {

// Runs one direction: picks its algorithm on first use (find(workspace) benchmarks cuDNN's
// candidates under the configured math type, not the one an earlier direction ran with), then
// run(choice, workspace) under the chosen algorithm's math type. A choice is shared with later
// layers of the same key only when it was searched with the whole workspace limit: one
// squeezed by a momentary shortage of memory stays with this layer.
template <class Find, class Run>
void with_algorithm(std::optional<Choice>& chosen, const std::string& key, int device,
                    std::size_t workspace_limit, cudnnConvolutionDescriptor_t conv,
                    cudnnMathType_t configured_math, cudaStream_t stream, Find&& find, Run&& run) {
  if (!chosen) chosen = chosen_algorithms().lookup(key);
  if (!chosen) {
    AIACC_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, configured_math));
    memory::PooledBuffer search_space = find_workspace(device, workspace_limit, stream);
    const Choice choice = find(search_space);
    log::get("cuda")->debug("cuDNN {}: algo {}, {} B workspace (searched with {} B)", key, choice.algo,
                            choice.workspace, search_space.bytes());
    chosen = search_space.bytes() == workspace_limit ? chosen_algorithms().remember(key, choice) : choice;
  }
  AIACC_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, chosen->math));
  memory::PooledBuffer ws;
  if (chosen->workspace > 0) ws = memory::PooledBuffer(device_allocator(device), chosen->workspace, stream_id(stream));
  run(*chosen, ws);
}

}  // namespace

void CudnnConv2d::forward(const CudnnHandle& cudnn, const void* x, const void* w, void* y, cudaStream_t stream) {
  DeviceGuard guard(device_);
  const cudnnHandle_t h = cudnn.on(stream);
  Descriptors& d = *descriptors_;
  const float alpha = 1.0f, beta = 0.0f;
  with_algorithm(
      d.chosen[static_cast<int>(Direction::forward)], choice_key(geometry_, options_, device_, Direction::forward),
      device_, options_.workspace_limit, d.conv.get(), d.math, stream,
      [&](const memory::PooledBuffer& ws) {
        int max = 0;
        AIACC_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
        std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(max));
        int returned = 0;
        AIACC_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, d.x.get(), x, d.w.get(), w, d.conv.get(),
                                                                 d.y.get(), y, max, &returned, perf.data(),
                                                                 ws.get(), ws.bytes()));
        return first_usable(perf, returned, ws.bytes(), "forward convolution for " + geometry_.str());
      },
      [&](const Choice& c, const memory::PooledBuffer& ws) {
        AIACC_CUDNN_CHECK(cudnnConvolutionForward(h, &alpha, d.x.get(), x, d.w.get(), w, d.conv.get(),
                                                  static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws.get(),
                                                  c.workspace, &beta, d.y.get(), y));
      });
}

void CudnnConv2d::backward_data(const CudnnHandle& cudnn, const void* w, const void* dy, void* dx,
                                cudaStream_t stream) {
  DeviceGuard guard(device_);
  const cudnnHandle_t h = cudnn.on(stream);
  Descriptors& d = *descriptors_;
  const float alpha = 1.0f, beta = 0.0f;
  with_algorithm(
      d.chosen[static_cast<int>(Direction::data)], choice_key(geometry_, options_, device_, Direction::data),
      device_, options_.workspace_limit, d.conv.get(), d.math, stream,
      [&](const memory::PooledBuffer& ws) {
        int max = 0;
        AIACC_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
        std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(max));
        int returned = 0;
        AIACC_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w.get(), w, d.y.get(), dy, d.conv.get(),
                                                                      d.x.get(), dx, max, &returned, perf.data(),
                                                                      ws.get(), ws.bytes()));
        return first_usable(perf, returned, ws.bytes(), "backward-data convolution for " + geometry_.str());
      },
      [&](const Choice& c, const memory::PooledBuffer& ws) {
        AIACC_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &alpha, d.w.get(), w, d.y.get(), dy, d.conv.get(),
                                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo),
                                                       ws.get(), c.workspace, &beta, d.x.get(), dx));
      });
}

void CudnnConv2d::backward_weight(const CudnnHandle& cudnn, const void* x, const void* dy, void* dw,
                                  cudaStream_t stream) {
  DeviceGuard guard(device_);
  const cudnnHandle_t h = cudnn.on(stream);
  Descriptors& d = *descriptors_;
  const float alpha = 1.0f, beta = 0.0f;
  with_algorithm(
      d.chosen[static_cast<int>(Direction::weight)], choice_key(geometry_, options_, device_, Direction::weight),
      device_, options_.workspace_limit, d.conv.get(), d.math, stream,
      [&](const memory::PooledBuffer& ws) {
        int max = 0;
        AIACC_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
        std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<std::size_t>(max));
        int returned = 0;
        AIACC_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x.get(), x, d.y.get(), dy, d.conv.get(),
                                                                        d.w.get(), dw, max, &returned, perf.data(),
                                                                        ws.get(), ws.bytes()));
        return first_usable(perf, returned, ws.bytes(), "backward-weight convolution for " + geometry_.str());
      },
      [&](const Choice& c, const memory::PooledBuffer& ws) {
        AIACC_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &alpha, d.x.get(), x, d.y.get(), dy, d.conv.get(),
                                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo),
                                                         ws.get(), c.workspace, &beta, d.w.get(), dw));
      });
}

std::string CudnnConv2d::describe() const {
  std::string out = fmt::format("{} {} {}", geometry_.str(), dtype_name(options_.dtype),
                                layout_name(options_.layout));
  for (Direction dir : {Direction::forward, Direction::data, Direction::weight}) {
    const auto& c = descriptors_->chosen[static_cast<int>(dir)];
    out += c ? fmt::format(", {} algo {} ({} B workspace)", direction_name(dir), c->algo, c->workspace)
             : fmt::format(", {} not chosen", direction_name(dir));
  }
  return out;
}

}  // namespace aiacc::cuda
