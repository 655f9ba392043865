// CudnnPool2d: the input and output descriptors and one pooling descriptor.
#include "core/cuda/pooling.h"

#include "core/cuda/detail/cudnn_descriptors.h"
#include "core/cuda/stream.h"

namespace aiacc::cuda {

struct CudnnPool2d::Descriptors {
  detail::TensorDescriptor x, y;
  detail::PoolingDescriptor pool;
};

CudnnPool2d::CudnnPool2d(const kernels::Pool2dGeometry& geometry, PoolMode mode, DType dtype,
                         TensorLayout layout, int device)
    : geometry_(geometry), device_(device) {
  geometry_.validate();
  constexpr const char* kLayer = "cuDNN pooling";
  const cudnnDataType_t type = detail::cudnn_type(dtype, kLayer);
  DeviceGuard guard(device_);
  descriptors_ = std::make_unique<Descriptors>();
  const auto& g = geometry_;
  detail::set_4d(descriptors_->x, layout, type, g.batch, g.channels, g.height, g.width, kLayer);
  detail::set_4d(descriptors_->y, layout, type, g.batch, g.channels, g.out_height(), g.out_width(), kLayer);
  AIACC_CUDNN_CHECK(cudnnSetPooling2dDescriptor(
      descriptors_->pool.get(),
      mode == PoolMode::max ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_PROPAGATE_NAN,
      detail::cudnn_dim(g.kernel_h, kLayer, "KH"), detail::cudnn_dim(g.kernel_w, kLayer, "KW"),
      detail::cudnn_dim(g.pad_h, kLayer, "pad_h"), detail::cudnn_dim(g.pad_w, kLayer, "pad_w"),
      detail::cudnn_dim(g.stride_h, kLayer, "stride_h"), detail::cudnn_dim(g.stride_w, kLayer, "stride_w")));
}

CudnnPool2d::~CudnnPool2d() = default;

void CudnnPool2d::forward(const CudnnHandle& cudnn, const void* x, void* y, cudaStream_t stream) {
  DeviceGuard guard(device_);
  const float one = 1.0f, zero = 0.0f;
  const Descriptors& d = *descriptors_;
  AIACC_CUDNN_CHECK(cudnnPoolingForward(cudnn.on(stream), d.pool.get(), &one, d.x.get(), x, &zero, d.y.get(), y));
}

void CudnnPool2d::backward(const CudnnHandle& cudnn, const void* x, const void* y, const void* dy, void* dx,
                           cudaStream_t stream) {
  DeviceGuard guard(device_);
  const float one = 1.0f, zero = 0.0f;
  const Descriptors& d = *descriptors_;
  AIACC_CUDNN_CHECK(cudnnPoolingBackward(cudnn.on(stream), d.pool.get(), &one, d.y.get(), y, d.y.get(), dy,
                                         d.x.get(), x, &zero, d.x.get(), dx));
}

}  // namespace aiacc::cuda
