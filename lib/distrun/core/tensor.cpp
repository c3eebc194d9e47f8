#include "distrun/core/tensor.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "distrun/config.hpp"
#include "distrun/core/error.hpp"
#include "distrun/core/half.hpp"
#include "distrun/core/host_staging.hpp"
#if DISTRUN_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

namespace distrun {

std::string Device::str() const { return is_cuda() ? "cuda:" + std::to_string(index) : "cpu"; }

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

#if DISTRUN_HAVE_NCCL
void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw BackendError(std::string(what) + ": " + cudaGetErrorString(err));
}
#endif

#if DISTRUN_HAVE_NCCL
// The caching allocator for CUDA tensors is the driver's own: the device's default memory pool,
// told to keep what is freed (release threshold: never) instead of returning it at every
// synchronisation. False on a device without memory pools (then plain cudaMalloc).
bool caching_pool_ready(int device) {
  static std::mutex mu;
  static std::map<int, bool> ready;
  std::lock_guard<std::mutex> lock(mu);
  auto it = ready.find(device);
  if (it != ready.end()) return it->second;
  int supported = 0;
  bool ok = cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) == cudaSuccess && supported;
  if (ok) {
    cudaMemPool_t pool = nullptr;
    uint64_t keep = std::numeric_limits<uint64_t>::max();
    ok = cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess &&
         cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess;
  }
  if (!ok) cudaGetLastError();  // not sticky: plain cudaMalloc it is
  return ready[device] = ok;
}
#endif

std::shared_ptr<std::byte> allocate(size_t bytes, Device device) {
  // At least one byte so that an empty tensor is still "defined".
  bytes = bytes ? bytes : 1;
  if (!device.is_cuda()) {
    // 64-byte alignment keeps vectorised reductions and memcpy on their fast paths.
    void* p = ::operator new[](bytes, std::align_val_t(64));
    return {static_cast<std::byte*>(p), [](std::byte* q) { ::operator delete[](q, std::align_val_t(64)); }};
  }
#if DISTRUN_HAVE_NCCL
  cuda_check(cudaSetDevice(device.index), "cudaSetDevice");
  void* p = nullptr;
  if (caching_pool_ready(device.index)) {
    // Stream-ordered on the legacy default stream, where every producer runs (tensor.hpp): the
    // driver's pool hands a freed block out again without cudaMalloc/cudaFree, and without
    // cudaFree's device-wide synchronisation.
    cuda_check(cudaMallocAsync(&p, bytes, cudaStreamLegacy), "cudaMallocAsync");
    return {static_cast<std::byte*>(p), [](std::byte* q) { cudaFreeAsync(q, cudaStreamLegacy); }};
  }
  cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
  return {static_cast<std::byte*>(p), [](std::byte* q) { cudaFree(q); }};
#else
  throw BackendError("tensor on " + device.str() + ": this build of distrun has no CUDA support");
#endif
}

void check_dim(const Tensor& t, int dim) {
  if (dim < 0 || dim >= t.dim())
    throw Error("dimension " + std::to_string(dim) + " out of range for shape " + shape_str(t.shape()));
}

// Bytes of one "row" below `dim`: the product of the sizes after dim, times the element size.
size_t inner_bytes(const Tensor& t, int dim) {
  size_t n = t.element_size();
  for (int d = dim + 1; d < t.dim(); ++d) n *= size_t(t.shape()[d]);
  return n;
}

size_t outer_count(const Tensor& t, int dim) {
  size_t n = 1;
  for (int d = 0; d < dim; ++d) n *= size_t(t.shape()[d]);
  return n;
}

}  // namespace

void copy_2d(void* dst, size_t dst_pitch, Device dst_dev, const void* src, size_t src_pitch, Device src_dev,
             size_t width, size_t height) {
  if (width == 0 || height == 0) return;
  if (dst_dev.is_cuda() || src_dev.is_cuda()) {
#if DISTRUN_HAVE_NCCL
    // Between host and device: through this thread's pinned staging buffer, asynchronously on
    // the legacy default stream (host_staging.hpp). Device to device: one copy on that stream.
    if (!src_dev.is_cuda())
      return HostStaging::for_this_thread(dst_dev.index).to_device(dst, dst_pitch, src, src_pitch, width, height);
    if (!dst_dev.is_cuda())
      return HostStaging::for_this_thread(src_dev.index).to_host(dst, dst_pitch, src, src_pitch, width, height);
    cuda_check(cudaMemcpy2D(dst, dst_pitch, src, src_pitch, width, height, cudaMemcpyDefault), "cudaMemcpy2D");
    return;
#else
    throw BackendError("copy involving a CUDA tensor: this build of distrun has no CUDA support");
#endif
  }
  if (dst_pitch == width && src_pitch == width) {
    std::memcpy(dst, src, width * height);
    return;
  }
  auto* d = static_cast<std::byte*>(dst);
  auto* s = static_cast<const std::byte*>(src);
  for (size_t r = 0; r < height; ++r) std::memcpy(d + r * dst_pitch, s + r * src_pitch, width);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    if (d < 0) throw Error("negative dimension in shape " + shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = allocate(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (!device.is_cuda()) {
    std::memset(t.data(), 0, t.nbytes());
  } else {
#if DISTRUN_HAVE_NCCL
    cuda_check(cudaMemset(t.data(), 0, t.nbytes()), "cudaMemset");
#endif
  }
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (numel_of(shape) != numel()) throw Error("cannot reshape " + shape_str(shape_) + " to " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::clone() const { return to(device_); }

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.dtype_ != dtype_ || src.numel() != numel())
    throw Error("copy_from: " + std::string(dtype_name(src.dtype_)) + shape_str(src.shape_) + " into " +
                dtype_name(dtype_) + shape_str(shape_));
  copy_2d(data(), nbytes(), device_, src.data(), nbytes(), src.device_, nbytes(), 1);
}

Tensor Tensor::slice(int dim, int64_t start, int64_t len) const {
  check_dim(*this, dim);
  if (start < 0 || len < 0 || start + len > shape_[dim])
    throw Error("slice [" + std::to_string(start) + ", " + std::to_string(start + len) + ") out of range along dim " +
                std::to_string(dim) + " of " + shape_str(shape_));
  Shape out_shape = shape_;
  out_shape[dim] = len;
  const size_t inner = inner_bytes(*this, dim);
  const size_t outer = outer_count(*this, dim);
  if (outer == 1) {  // contiguous: a view
    Tensor v = *this;
    v.offset_ += size_t(start) * inner;
    v.shape_ = out_shape;
    return v;
  }
  Tensor t = empty(out_shape, dtype_, device_);
  const size_t row = size_t(len) * inner;
  copy_2d(t.data(), row, device_, static_cast<const std::byte*>(data()) + size_t(start) * inner,
          size_t(shape_[dim]) * inner, device_, row, outer);
  return t;
}

Tensor Tensor::chunk(int dim, int index, int chunks) const {
  check_dim(*this, dim);
  if (chunks <= 0 || shape_[dim] % chunks != 0)
    throw Error("size " + std::to_string(shape_[dim]) + " of dim " + std::to_string(dim) + " does not split into " +
                std::to_string(chunks) + " equal chunks");
  const int64_t len = shape_[dim] / chunks;
  return slice(dim, int64_t(index) * len, len);
}

void Tensor::assign_slice(int dim, int64_t start, const Tensor& src) {
  check_dim(*this, dim);
  if (src.dtype_ != dtype_ || src.dim() != this->dim()) throw Error("assign_slice: dtype or rank mismatch");
  for (int d = 0; d < this->dim(); ++d)
    if (d != dim && src.shape_[d] != shape_[d])
      throw Error("assign_slice: shape " + shape_str(src.shape_) + " does not fit " + shape_str(shape_) +
                  " along dim " + std::to_string(dim));
  if (start < 0 || start + src.shape_[dim] > shape_[dim])
    throw Error("assign_slice: out of range along dim " + std::to_string(dim));
  const size_t inner = inner_bytes(*this, dim);
  const size_t row = size_t(src.shape_[dim]) * inner;
  copy_2d(static_cast<std::byte*>(data()) + size_t(start) * inner, size_t(shape_[dim]) * inner, device_, src.data(),
          row, src.device_, row, outer_count(*this, dim));
}

Tensor Tensor::cat(const std::vector<Tensor>& parts, int dim) {
  if (parts.empty()) throw Error("cat of no tensors");
  Shape shape = parts[0].shape_;
  check_dim(parts[0], dim);
  shape[dim] = 0;
  for (const Tensor& p : parts) shape[dim] += p.shape_[dim];
  Tensor out = empty(shape, parts[0].dtype_, parts[0].device_);
  int64_t at = 0;
  for (const Tensor& p : parts) {
    out.assign_slice(dim, at, p);
    at += p.shape_[dim];
  }
  return out;
}

double Tensor::get(int64_t flat) const {
  if (device_.is_cuda()) throw Error("Tensor::get on a CUDA tensor: copy it to the CPU first");
  switch (dtype_) {
    case DType::Float16: return half_to_float(data_as<uint16_t>()[flat]);
    case DType::BFloat16: return bf16_to_float(data_as<uint16_t>()[flat]);
    default: return dispatch_storage(dtype_, [&](auto tag) { return double(data_as<decltype(tag)>()[flat]); });
  }
}

namespace {
template <typename T>
T saturate_cast(double v) {
  // Integers convert like C casts of in-range values; out-of-range values wrap as torch does
  // for integer tensors, via int64.
  if constexpr (std::is_integral_v<T>) {
    if (std::isnan(v)) return 0;
    return T(int64_t(v));
  } else {
    return T(v);
  }
}
}  // namespace

void Tensor::set(int64_t flat, double v) {
  if (device_.is_cuda()) throw Error("Tensor::set on a CUDA tensor");
  switch (dtype_) {
    case DType::Float16: data_as<uint16_t>()[flat] = float_to_half(float(v)); return;
    case DType::BFloat16: data_as<uint16_t>()[flat] = float_to_bf16(float(v)); return;
    default:
      dispatch_storage(dtype_, [&](auto tag) {
        using T = decltype(tag);
        data_as<T>()[flat] = saturate_cast<T>(v);
      });
  }
}

}  // namespace distrun
