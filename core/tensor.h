// Tensors: a shape, a dtype, a device and a shared, RAII-owned storage. Tensors are contiguous
// (row-major); views (reshape, row ranges) share storage without copying, which is how dense
// gradients live as slices of one flat buffer. Copying a Tensor copies the handle, not the data.
// Thread-safety: like a raw buffer; concurrent writes to overlapping views are the caller's problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/util/half.h"

namespace aiacc {

enum class DType : std::uint8_t { f32, f64, f16, bf16, i64, i32, u8 };

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
DType parse_dtype(const std::string& name);  // "f32", "fp16", "bf16", ... ; ConfigError otherwise

template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<Half>() { return DType::f16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }

enum class DeviceKind : std::uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  static Device cpu() { return {}; }
  static Device cuda(int index) { return {DeviceKind::cuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  std::string str() const;
  // "cpu", "cuda" (device 0) or "cuda:N"; nullopt for anything else.
  static std::optional<Device> parse(std::string_view text);
  bool operator==(const Device&) const = default;
};

// Dimensions of a tensor, at most kMaxRank of them.
class Shape {
 public:
  static constexpr int kMaxRank = 8;
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(const std::vector<std::int64_t>& dims);
  int rank() const { return rank_; }
  std::int64_t operator[](int axis) const;  // negative axes count from the end
  std::int64_t numel() const;
  std::vector<std::int64_t> dims() const { return {dims_, dims_ + rank_}; }
  std::string str() const;  // "[2, 3, 4]"
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  std::int64_t dims_[kMaxRank] = {};
  int rank_ = 0;
};

// Memory and copies for a non-CPU device kind. core knows no device API: the module that does
// registers its backend at start-up (cuda::register_tensor_backend() in core/cuda/tensor_backend.h),
// after which tensors on that kind allocate, copy and zero through it.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // `bytes` on device `index` (throws OutOfMemoryError or the backend's error).
  virtual void* allocate(std::size_t bytes, int index) = 0;
  virtual void release(void* ptr, int index) noexcept = 0;
  // `bytes` from src to dst, one of them on this backend's kind, the other on the CPU or this
  // kind. Returns once `src` may be changed and, for a CPU `dst`, once dst holds the bytes.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    std::size_t bytes) = 0;
  virtual void zero(void* dst, int index, std::size_t bytes) = 0;
};
// Installs the backend of `kind` for the storages allocated from now on (each storage releases
// through the backend that allocated it). Backends are kept until the process exits.
void register_device_backend(DeviceKind kind, std::unique_ptr<DeviceBackend> backend);

// Owns device or host memory. CPU memory is 64-byte aligned. Move-only through shared_ptr.
class Storage {
 public:
  // Throws Error when the allocation fails (naming the size) or the device is not available.
  static std::shared_ptr<Storage> allocate(std::size_t num_bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t num_bytes() const { return num_bytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, std::size_t num_bytes, Device device, DeviceBackend* backend)
      : data_(data), num_bytes_(num_bytes), device_(device), backend_(backend) {}
  void* data_;
  std::size_t num_bytes_;
  Device device_;
  DeviceBackend* backend_;  // null for CPU memory
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage

  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  // A CPU tensor holding `values` (count must match the shape).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int axis) const { return shape_[axis]; }
  int rank() const { return shape_.rank(); }
  std::int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  std::size_t num_bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }

  void* raw_data() const;
  // Typed access; throws InternalError when T does not match the dtype.
  template <class T>
  T* data() const {
    AIACC_CHECK(dtype_ == dtype_of<T>(), "tensor holds {} but was read as {}", dtype_name(dtype_),
                dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw_data());
  }
  template <class T>
  std::span<T> span() const {
    return {data<T>(), static_cast<std::size_t>(numel())};
  }
  template <class T>
  std::vector<T> to_vector() const {
    auto s = span<T>();
    return {s.begin(), s.end()};
  }

  // Views sharing storage.
  Tensor reshape(const Shape& shape) const;                  // same numel
  Tensor rows(std::int64_t begin, std::int64_t end) const;   // [begin, end) along axis 0
  Tensor flat() const { return reshape(Shape{numel()}); }

  Tensor clone() const;                        // deep copy on the same device
  void copy_from(const Tensor& source);        // same shape and dtype; any devices (see DeviceBackend::copy)
  Tensor to(DType dtype) const;                // converted copy (float types and integers); CPU only
  Tensor to(Device device) const;              // a copy on `device`; this tensor when already there
  void fill(double value);                     // CPU only
  void zero();                                 // any device

  // Points this tensor's handle at `view`'s storage, keeping its contents (used to move
  // gradients into a flat buffer). Shapes and dtypes must match.
  void rebind(const Tensor& view);

 private:
  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  AIACC_CHECK_EQ(static_cast<std::int64_t>(values.size()), shape.numel(), "values for shape {}",
                 shape.str());
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

}  // namespace aiacc
