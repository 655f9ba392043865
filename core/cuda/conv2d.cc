// CudnnConv2d: cuDNN descriptors, benchmarked algorithm choice cached per shape, and the three
// convolution directions with workspaces from the caching allocator.
#include "core/cuda/conv2d.h"

#include <fmt/format.h>

#include <limits>
#include <optional>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "core/log.h"
#include "core/util/find_once_cache.h"

namespace aiacc::cuda {
namespace {

enum class Direction { forward, data, weight };

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::forward: return "forward";
    case Direction::data: return "data";
    case Direction::weight: return "weight";
  }
  return "?";
}

// A cuDNN descriptor, destroyed with it. Move-less: it lives inside Descriptors.
template <class Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class Descriptor {
 public:
  Descriptor() { AIACC_CUDNN_CHECK(Create(&handle_)); }
  ~Descriptor() {
    const cudnnStatus_t status = Destroy(handle_);
    if (status != CUDNN_STATUS_SUCCESS) {
      try {
        log::get("cuda")->warn("destroying a cuDNN descriptor failed: {}", cudnnGetErrorString(status));
      } catch (...) {
        // Nothing more to do in a destructor.
      }
    }
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Handle get() const { return handle_; }

 private:
  Handle handle_ = nullptr;
};

using TensorDescriptor = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDescriptor = Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                  cudnnDestroyConvolutionDescriptor>;

cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f16: return CUDNN_DATA_HALF;
    default:
      throw ConfigError(fmt::format("cuDNN convolution: dtype {} (expected f32, bf16 or f16)", dtype_name(dtype)));
  }
}

int as_int(std::int64_t v, const char* what) {
  if (v > std::numeric_limits<int>::max()) {
    throw ConfigError(fmt::format("cuDNN convolution: {} = {} does not fit cuDNN's int", what, v));
  }
  return static_cast<int>(v);
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
  std::optional<Choice> chosen[3];
};

CudnnConv2d::CudnnConv2d(const kernels::Conv2dGeometry& geometry, CudnnConvOptions options, int device)
    : geometry_(geometry), options_(options), device_(device) {
  geometry_.validate();
  const cudnnDataType_t type = cudnn_type(options_.dtype);
  const cudnnTensorFormat_t format =
      options_.layout == TensorLayout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  DeviceGuard guard(device_);
  descriptors_ = std::make_unique<Descriptors>();
  const auto& g = geometry_;
  AIACC_CUDNN_CHECK(cudnnSetTensor4dDescriptor(descriptors_->x.get(), format, type, as_int(g.batch, "N"),
                                               as_int(g.in_channels, "C"), as_int(g.height, "H"),
                                               as_int(g.width, "W")));
  AIACC_CUDNN_CHECK(cudnnSetTensor4dDescriptor(descriptors_->y.get(), format, type, as_int(g.batch, "N"),
                                               as_int(g.out_channels, "O"), as_int(g.out_height(), "OH"),
                                               as_int(g.out_width(), "OW")));
  AIACC_CUDNN_CHECK(cudnnSetFilter4dDescriptor(descriptors_->w.get(), type, format, as_int(g.out_channels, "O"),
                                               as_int(g.in_channels, "C"), as_int(g.kernel_h, "KH"),
                                               as_int(g.kernel_w, "KW")));
  // fp32 accumulation for every storage type (fp16 too: "pseudo-half" in cuDNN's terms).
  AIACC_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      descriptors_->conv.get(), as_int(g.pad_h, "pad_h"), as_int(g.pad_w, "pad_w"),
      as_int(g.stride_h, "stride_h"), as_int(g.stride_w, "stride_w"), 1, 1, CUDNN_CROSS_CORRELATION,
      CUDNN_DATA_FLOAT));
  const cudnnMathType_t math = options_.dtype != DType::f32 ? CUDNN_TENSOR_OP_MATH
                               : options_.allow_tf32        ? CUDNN_DEFAULT_MATH
                                                            : CUDNN_FMA_MATH;
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
                     o.layout == TensorLayout::nhwc ? "nhwc" : "nchw", o.allow_tf32, o.workspace_limit,
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
// candidates, once per key in the process), then run(choice, workspace).
template <class Find, class Run>
void with_algorithm(std::optional<Choice>& chosen, const std::string& key, int device,
                    std::size_t workspace_limit, cudnnConvolutionDescriptor_t conv,
                    cudaStream_t stream, Find&& find, Run&& run) {
  if (!chosen) {
    chosen = chosen_algorithms().get_or_find(key, [&] {
      memory::PooledBuffer ws = find_workspace(device, workspace_limit, stream);
      const Choice choice = find(ws);
      log::get("cuda")->debug("cuDNN {}: algo {}, {} B workspace", key, choice.algo, choice.workspace);
      return choice;
    });
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
      device_, options_.workspace_limit, d.conv.get(), stream,
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
      device_, options_.workspace_limit, d.conv.get(), stream,
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
      device_, options_.workspace_limit, d.conv.get(), stream,
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
                                options_.layout == TensorLayout::nhwc ? "nhwc" : "nchw");
  for (Direction dir : {Direction::forward, Direction::data, Direction::weight}) {
    const auto& c = descriptors_->chosen[static_cast<int>(dir)];
    out += c ? fmt::format(", {} algo {} ({} B workspace)", direction_name(dir), c->algo, c->workspace)
             : fmt::format(", {} not chosen", direction_name(dir));
  }
  return out;
}

}  // namespace aiacc::cuda
