// Shape, Storage and Tensor. Non-CPU storage goes through a registered DeviceBackend (core/cuda's).
#include "core/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace aiacc {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i64: return 8;
    case DType::i32: return 4;
    case DType::u8: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  if (name == "f32" || name == "fp32" || name == "float32") return DType::f32;
  if (name == "f64" || name == "fp64" || name == "float64") return DType::f64;
  if (name == "f16" || name == "fp16" || name == "float16") return DType::f16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "i64" || name == "int64") return DType::i64;
  if (name == "i32" || name == "int32") return DType::i32;
  if (name == "u8" || name == "uint8") return DType::u8;
  throw ConfigError("unknown dtype '" + name + "' (expected f32, f64, f16, bf16, i64, i32, u8)");
}

std::string Device::str() const {
  return kind == DeviceKind::cpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

std::optional<Device> Device::parse(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  constexpr std::string_view prefix = "cuda:";
  if (text.substr(0, prefix.size()) != prefix || text.size() == prefix.size() || text.size() > prefix.size() + 4) {
    return std::nullopt;
  }
  int index = 0;
  for (char c : text.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    index = index * 10 + (c - '0');
  }
  return Device::cuda(index);
}

Shape::Shape(std::initializer_list<std::int64_t> dims) : Shape(std::vector<std::int64_t>(dims)) {}

Shape::Shape(const std::vector<std::int64_t>& dims) {
  if (dims.size() > static_cast<std::size_t>(kMaxRank)) {
    throw Error(fmt::format("shape of rank {} exceeds the maximum rank {}", dims.size(), kMaxRank));
  }
  for (std::int64_t d : dims) {
    if (d < 0) throw Error(fmt::format("negative dimension {} in a shape", d));
    dims_[rank_++] = d;
  }
}

std::int64_t Shape::operator[](int axis) const {
  int resolved = axis < 0 ? axis + rank_ : axis;
  AIACC_CHECK(resolved >= 0 && resolved < rank_, "axis {} of shape {}", axis, str());
  return dims_[resolved];
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) {
    // A shape from a config or a computation (rows x dim) could overflow: caught here, before
    // an allocation sized from a wrapped count.
    if (__builtin_mul_overflow(n, dims_[i], &n)) throw Error(fmt::format("shape {}: too many elements", str()));
  }
  return n;
}

std::string Shape::str() const {
  std::string out = "[";
  for (int i = 0; i < rank_; ++i) out += (i ? ", " : "") + std::to_string(dims_[i]);
  return out + "]";
}

bool Shape::operator==(const Shape& other) const {
  return rank_ == other.rank_ && std::equal(dims_, dims_ + rank_, other.dims_);
}

namespace {

// One slot per device kind; backends are never destroyed (storage may be freed during exit).
std::atomic<DeviceBackend*> device_backends[2] = {};

DeviceBackend& backend_of(Device device) {
  DeviceBackend* backend = device_backends[static_cast<int>(device.kind)].load(std::memory_order_acquire);
  if (backend == nullptr) {
    throw Error(fmt::format("no tensor backend for {}: device storage is provided by the GPU path "
                            "(core/cuda, cuda::register_tensor_backend())", device.str()));
  }
  return *backend;
}

// `bytes` from src to dst on any pair of devices.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, bytes);
    return;
  }
  backend_of(dst_device.is_cpu() ? src_device : dst_device).copy(dst, dst_device, src, src_device, bytes);
}

}  // namespace

void register_device_backend(DeviceKind kind, std::unique_ptr<DeviceBackend> backend) {
  AIACC_CHECK(kind != DeviceKind::cpu && backend != nullptr, "register_device_backend");
  // The old one is kept (leaked) on purpose: storages it allocated release through it.
  device_backends[static_cast<int>(kind)].store(backend.release(), std::memory_order_release);
}

std::shared_ptr<Storage> Storage::allocate(std::size_t num_bytes, Device device) {
  if (!device.is_cpu()) {
    DeviceBackend& backend = backend_of(device);
    void* data = backend.allocate(num_bytes, device.index);
    Storage* storage = nullptr;
    try {
      storage = new Storage(data, num_bytes, device, &backend);
    } catch (...) {
      backend.release(data, device.index);
      throw;
    }
    // From here the Storage owns `data`: a failing shared_ptr deletes it, which releases once.
    return std::shared_ptr<Storage>(storage);
  }
  constexpr std::size_t kAlignment = 64;  // a cache line, and enough for AVX-512 loads
  std::size_t rounded = std::max<std::size_t>(kAlignment, (num_bytes + kAlignment - 1) / kAlignment * kAlignment);
  void* data = std::aligned_alloc(kAlignment, rounded);
  if (!data) throw Error(fmt::format("out of host memory allocating {} bytes", num_bytes));
  return std::shared_ptr<Storage>(new Storage(data, num_bytes, device, nullptr));
}

Storage::~Storage() {
  if (backend_ != nullptr) {
    backend_->release(data_, device_.index);
  } else {
    std::free(data_);
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  std::size_t bytes = 0;
  // Bounded well below SIZE_MAX so the allocator's rounding cannot wrap either.
  if (__builtin_mul_overflow(static_cast<std::size_t>(shape.numel()), dtype_size(dtype), &bytes) ||
      bytes > (std::size_t{1} << 60)) {
    throw Error(fmt::format("tensor {} of {}: too many bytes to allocate", shape.str(), dtype_name(dtype)));
  }
  t.storage_ = Storage::allocate(bytes, device);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill(value);
  return t;
}

void* Tensor::raw_data() const {
  AIACC_CHECK(storage_ != nullptr, "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

Tensor Tensor::reshape(const Shape& shape) const {
  AIACC_CHECK_EQ(shape.numel(), numel(), "reshape {} -> {}", shape_.str(), shape.str());
  Tensor view = *this;
  view.shape_ = shape;
  return view;
}

Tensor Tensor::rows(std::int64_t begin, std::int64_t end) const {
  AIACC_CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= dim(0),
              "rows [{}, {}) of shape {}", begin, end, shape_.str());
  std::vector<std::int64_t> dims = shape_.dims();
  std::int64_t row_elems = dims[0] == 0 ? 0 : numel() / dims[0];
  dims[0] = end - begin;
  Tensor view = *this;
  view.shape_ = Shape(dims);
  view.offset_bytes_ += static_cast<std::size_t>(begin * row_elems) * dtype_size(dtype_);
  return view;
}

Tensor Tensor::clone() const {
  Tensor copy = empty(shape_, dtype_, device());
  copy.copy_from(*this);
  return copy;
}

void Tensor::copy_from(const Tensor& source) {
  AIACC_CHECK(shape_ == source.shape_ && dtype_ == source.dtype_, "copy {} {} <- {} {}",
              dtype_name(dtype_), shape_.str(), dtype_name(source.dtype_), source.shape_.str());
  copy_bytes(raw_data(), device(), source.raw_data(), source.device(), num_bytes());
}

namespace {

template <class T>
double load_as_double(const void* base, std::int64_t i) {
  const T* p = static_cast<const T*>(base) + i;
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return to_float(*p);
  } else {
    return static_cast<double>(*p);
  }
}

template <class T>
void store_from_double(void* base, std::int64_t i, double value) {
  T* p = static_cast<T*>(base) + i;
  if constexpr (std::is_same_v<T, Half>) {
    *p = to_half(static_cast<float>(value));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    *p = to_bf16(static_cast<float>(value));
  } else {
    *p = static_cast<T>(value);
  }
}

template <class F>
void dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    case DType::f16: f(Half{}); break;
    case DType::bf16: f(BFloat16{}); break;
    case DType::i64: f(std::int64_t{}); break;
    case DType::i32: f(std::int32_t{}); break;
    case DType::u8: f(std::uint8_t{}); break;
  }
}

}  // namespace

Tensor Tensor::to(Device target) const {
  if (!defined() || device() == target) return *this;
  Tensor out = empty(shape_, dtype_, target);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  AIACC_CHECK(device().is_cpu(), "Tensor::to is host-only");
  Tensor out = empty(shape_, dtype);
  const std::int64_t n = numel();
  const void* src = raw_data();
  void* dst = out.raw_data();
  dispatch_dtype(dtype_, [&](auto src_tag) {
    using S = decltype(src_tag);
    dispatch_dtype(dtype, [&](auto dst_tag) {
      using D = decltype(dst_tag);
      if constexpr (std::is_same_v<S, D>) {
        // Exact, where the path through double would round integers above 2^53 (hashed ids).
        std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(S));
      } else {
        for (std::int64_t i = 0; i < n; ++i) store_from_double<D>(dst, i, load_as_double<S>(src, i));
      }
    });
  });
  return out;
}

void Tensor::fill(double value) {
  AIACC_CHECK(device().is_cpu(), "Tensor::fill is host-only");
  const std::int64_t n = numel();
  void* base = raw_data();
  dispatch_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < n; ++i) store_from_double<T>(base, i, value);
  });
}

void Tensor::zero() {
  if (num_bytes() == 0) return;
  if (device().is_cpu()) {
    std::memset(raw_data(), 0, num_bytes());
  } else {
    backend_of(device()).zero(raw_data(), device().index, num_bytes());
  }
}

void Tensor::rebind(const Tensor& view) {
  AIACC_CHECK(view.shape_ == shape_ && view.dtype_ == dtype_, "rebind {} {} to {} {}",
              dtype_name(dtype_), shape_.str(), dtype_name(view.dtype_), view.shape_.str());
  if (defined() && view.raw_data() != raw_data()) {
    copy_bytes(view.raw_data(), view.device(), raw_data(), device(), num_bytes());
  }
  storage_ = view.storage_;
  offset_bytes_ = view.offset_bytes_;
}

}  // namespace aiacc
