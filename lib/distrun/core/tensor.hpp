// A dense, contiguous, row-major tensor on the CPU or a CUDA device. Copies share storage
// (like torch.Tensor); clone() makes a deep copy. Slices along any dimension are packed with
// one strided block copy, never element by element.
// CUDA work (fills, copies) is issued on the default stream and may still be running when a call
// returns; a backend that runs on its own streams must order them after it (the NCCL backend
// waits for an event on the legacy default stream before every launch). CUDA storage comes from
// the device's stream-ordered memory pool (freed on the legacy default stream, kept cached).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distrun/core/dtype.hpp"

namespace distrun {

using Shape = std::vector<int64_t>;

/// Where a tensor's storage lives: the CPU, or CUDA device `index`.
struct Device {
  enum class Kind : uint8_t { Cpu, Cuda };
  Kind kind = Kind::Cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {Kind::Cuda, index}; }
  bool is_cuda() const { return kind == Kind::Cuda; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  std::string str() const;
};

/// Number of elements of a shape (1 for a scalar's empty shape).
int64_t numel_of(const Shape& shape);
/// "[2, 5]" for printing and error messages.
std::string shape_str(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  /// Uninitialised storage for `shape` elements of `dtype` on `device`.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  /// Zero-filled tensor.
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  /// Concatenates `parts` along `dim`; every other dimension must agree.
  static Tensor cat(const std::vector<Tensor>& parts, int dim);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int dim() const { return int(shape_.size()); }
  int64_t numel() const { return numel_of(shape_); }
  size_t element_size() const { return dtype_size(dtype_); }
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  Device device() const { return device_; }

  void* data() { return storage_.get() + offset_; }
  const void* data() const { return storage_.get() + offset_; }
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(data());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data());
  }

  /// A tensor sharing this one's storage with another shape of the same element count.
  Tensor reshape(const Shape& shape) const;
  /// Deep copy, on `device` (default: this tensor's device).
  Tensor clone() const;
  Tensor to(Device device) const;

  /// Elements [start, start+len) along `dim`, as a new contiguous tensor (a view sharing
  /// storage when the slice is contiguous, i.e. every dimension before `dim` has size 1).
  Tensor slice(int dim, int64_t start, int64_t len) const;
  /// Chunk `index` of `chunks` equal pieces along `dim` (the size must divide evenly).
  Tensor chunk(int dim, int index, int chunks) const;
  /// Writes `src` into this tensor at [start, start + src.shape[dim]) along `dim`.
  void assign_slice(int dim, int64_t start, const Tensor& src);
  /// Copies `src`'s bytes into this tensor (same dtype and element count; any devices).
  void copy_from(const Tensor& src);

  /// Element `flat` (row-major) as a double; CPU tensors only. For printing and checking.
  double get(int64_t flat) const;
  /// Sets element `flat` from a double, converting (and rounding) to the dtype; CPU only.
  void set(int64_t flat, double value);

 private:
  std::shared_ptr<std::byte> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::Float32;
  Device device_;
};

/// Copies `height` rows of `width` bytes with pitches `dst_pitch` and `src_pitch`: one
/// memcpy per row on the CPU; between host and device through the pinned staging buffer
/// (host_staging.hpp), device to device one cudaMemcpy2D.
void copy_2d(void* dst, size_t dst_pitch, Device dst_dev, const void* src, size_t src_pitch, Device src_dev,
             size_t width, size_t height);

}  // namespace distrun
