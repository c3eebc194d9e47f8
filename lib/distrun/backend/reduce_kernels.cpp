#include "distrun/backend/reduce_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "distrun/core/error.hpp"
#include "distrun/core/half.hpp"

namespace distrun {

namespace {

struct Sum {
  template <typename T>
  T operator()(T a, T b) const {
    return T(a + b);
  }
};
struct Prod {
  template <typename T>
  T operator()(T a, T b) const {
    return T(a * b);
  }
};
// min and max propagate NaN, as torch.minimum/torch.maximum do: with std::min alone a NaN
// survived or vanished depending on which rank held it (the order of the operands).
struct Min {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
    }
    return std::min(a, b);
  }
};
struct Max {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
    }
    return std::max(a, b);
  }
};
struct BAnd {
  template <typename T>
  T operator()(T a, T b) const {
    return T(a & b);
  }
};
struct BOr {
  template <typename T>
  T operator()(T a, T b) const {
    return T(a | b);
  }
};
struct BXor {
  template <typename T>
  T operator()(T a, T b) const {
    return T(a ^ b);
  }
};

// Plain loops over restrict-free pointers still vectorise at -O2/-O3 for the native types.
template <typename T, typename Op>
void native(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  Op op;
  for (size_t i = 0; i < n; ++i) o[i] = op(x[i], y[i]);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float), typename Op>
void half(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<uint16_t*>(out);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  Op op;
  for (size_t i = 0; i < n; ++i) o[i] = FromF(op(ToF(x[i]), ToF(y[i])));
}

template <typename Op>
ReduceFn pick(DType t) {
  switch (t) {
    case DType::Float32: return native<float, Op>;
    case DType::Float64: return native<double, Op>;
    case DType::Float16: return half<half_to_float, float_to_half, Op>;
    case DType::BFloat16: return half<bf16_to_float, float_to_bf16, Op>;
    case DType::Int8: return native<int8_t, Op>;
    case DType::UInt8: return native<uint8_t, Op>;
    case DType::Int16: return native<int16_t, Op>;
    case DType::Int32: return native<int32_t, Op>;
    case DType::Int64: return native<int64_t, Op>;
    case DType::Bool: return native<bool, Op>;
  }
  return nullptr;
}

template <typename Op>
ReduceFn pick_int(DType t) {
  switch (t) {
    case DType::Int8: return native<int8_t, Op>;
    case DType::UInt8: return native<uint8_t, Op>;
    case DType::Int16: return native<int16_t, Op>;
    case DType::Int32: return native<int32_t, Op>;
    case DType::Int64: return native<int64_t, Op>;
    case DType::Bool: return native<bool, Op>;
    default: return nullptr;
  }
}

}  // namespace

ReduceFn reduce_kernel(DType dtype, ReduceOp op) {
  ReduceFn f = nullptr;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: f = pick<Sum>(dtype); break;
    case ReduceOp::Prod: f = pick<Prod>(dtype); break;
    case ReduceOp::Min: f = pick<Min>(dtype); break;
    case ReduceOp::Max: f = pick<Max>(dtype); break;
    case ReduceOp::BAnd: f = pick_int<BAnd>(dtype); break;
    case ReduceOp::BOr: f = pick_int<BOr>(dtype); break;
    case ReduceOp::BXor: f = pick_int<BXor>(dtype); break;
  }
  if (auto why = reduce_op_refusal(op, dtype)) throw BackendError(*why);
  return f;
}

void divide_by(Tensor& t, int64_t n) {
  if (t.device().is_cuda()) throw BackendError("divide_by on a CUDA tensor");
  const int64_t count = t.numel();
  dispatch_storage(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, uint16_t>) {  // float16, bfloat16: in float, rounded once
      for (int64_t i = 0; i < count; ++i) t.set(i, t.get(i) / double(n));
    } else if constexpr (std::is_integral_v<T>) {  // exact, in int64 (never through a double)
      T* p = t.data_as<T>();
      for (int64_t i = 0; i < count; ++i) p[i] = T(int64_t(p[i]) / n);
    } else {
      T* p = t.data_as<T>();
      for (int64_t i = 0; i < count; ++i) p[i] /= T(n);
    }
  });
}

}  // namespace distrun
