// Tensor storage, slicing along any dimension, concatenation, dtype conversions.
#include <catch2/catch.hpp>

#include <algorithm>

#include "distrun/core/error.hpp"
#include "distrun/core/half.hpp"
#include "distrun/core/staging_plan.hpp"
#include "distrun/core/tensor.hpp"

using namespace distrun;

namespace {
Tensor iota(const Shape& shape, DType dt = DType::Float32) {
  Tensor t = Tensor::empty(shape, dt);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, double(i));
  return t;
}
}  // namespace

TEST_CASE("dtype names round-trip and sizes are right") {
  for (auto dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8, DType::UInt8,
                  DType::Int16, DType::Int32, DType::Int64, DType::Bool}) {
    REQUIRE(parse_dtype(dtype_name(dt)) == dt);
  }
  CHECK(dtype_names().size() == 10);
  CHECK(parse_dtype("short") == DType::Int16);
  CHECK_FALSE(parse_dtype("uint64"));  // torch 1.13 has no uint64
  CHECK(dtype_size(DType::Int16) == 2);
  CHECK(dtype_size(DType::Bool) == 1);
  CHECK(integer_range(DType::Int16) == std::pair<int64_t, int64_t>{-32768, 32767});
  CHECK(integer_range(DType::Bool) == std::pair<int64_t, int64_t>{0, 1});
  CHECK(dtype_size(DType::BFloat16) == 2);
  CHECK(dtype_size(DType::Int64) == 8);
  CHECK_FALSE(parse_dtype("complex64"));
  CHECK(is_integer(DType::UInt8));
  CHECK_FALSE(is_integer(DType::BFloat16));
}

TEST_CASE("half and bfloat16 conversions round to nearest even") {
  CHECK(half_to_float(float_to_half(1.0f)) == 1.0f);
  CHECK(half_to_float(float_to_half(65504.0f)) == 65504.0f);
  CHECK(std::isinf(half_to_float(float_to_half(70000.0f))));
  CHECK(half_to_float(float_to_half(5.96046448e-08f)) == 5.96046448e-08f);  // smallest subnormal
  CHECK(half_to_float(float_to_half(2049.0f)) == 2048.0f);                  // tie -> even
  CHECK(half_to_float(float_to_half(2051.0f)) == 2052.0f);
  CHECK(bf16_to_float(float_to_bf16(1.0f)) == 1.0f);
  CHECK(bf16_to_float(float_to_bf16(257.0f)) == 256.0f);  // 8 bits of mantissa: tie -> even
  CHECK(bf16_to_float(float_to_bf16(259.0f)) == 260.0f);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST_CASE("row slices are views, column slices are packed copies") {
  Tensor t = iota({4, 6});
  Tensor row = t.slice(0, 1, 2);
  REQUIRE(row.shape() == Shape{2, 6});
  CHECK(row.data() == static_cast<char*>(t.data()) + 6 * 4);
  CHECK(row.get(0) == 6);

  Tensor col = t.chunk(1, 1, 3);  // columns 2..3
  REQUIRE(col.shape() == Shape{4, 2});
  CHECK(col.get(0) == 2);
  CHECK(col.get(1) == 3);
  CHECK(col.get(2) == 8);
  CHECK(col.get(7) == 21);
}

TEST_CASE("assign_slice and cat are inverse to chunk along every dim") {
  Tensor t = iota({2, 3, 4}, DType::Int64);
  for (int dim = 0; dim < 3; ++dim) {
    int n = int(t.shape()[size_t(dim)]);
    std::vector<Tensor> parts;
    for (int c = 0; c < n; ++c) parts.push_back(t.chunk(dim, c, n));
    Tensor back = Tensor::cat(parts, dim);
    REQUIRE(back.shape() == t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) CHECK(back.get(i) == t.get(i));
  }
}

TEST_CASE("chunk refuses sizes that do not split evenly") {
  Tensor t = iota({3, 5});
  CHECK_THROWS_AS(t.chunk(1, 0, 2), Error);
  CHECK_THROWS_AS(t.slice(0, 2, 2), Error);
  CHECK_THROWS_AS(t.reshape({4, 4}), Error);
}

TEST_CASE("set converts and rounds to the dtype") {
  Tensor i8 = Tensor::empty({1}, DType::Int8);
  i8.set(0, 3.9);
  CHECK(i8.get(0) == 3);
  Tensor h = Tensor::empty({1}, DType::Float16);
  h.set(0, 0.1);
  CHECK(h.get(0) == Approx(0.0999755859375));
}

TEST_CASE("clone is deep, copies share storage") {
  Tensor a = iota({3});
  Tensor b = a;
  Tensor c = a.clone();
  a.set(0, 42);
  CHECK(b.get(0) == 42);
  CHECK(c.get(0) == 0);
}

TEST_CASE("pinned staging plan: every byte of a strided copy in exactly one piece that fits a half") {
  // The plan host_staging.cpp copies by (the copies themselves need a GPU: nccl_gpu_tests).
  struct Case {
    size_t width, height, chunk;
  };
  for (Case c : {Case{8, 10, 32}, Case{32, 10, 32}, Case{33, 3, 32}, Case{100, 7, 32}, Case{5, 1, 4096},
                 Case{4096, 4096, 4096 * 3 + 1}, Case{1, 1, 1}}) {
    std::vector<int> seen(c.width * c.height, 0);
    size_t outside = 0, too_big = 0, empty = 0;
    for (const StagingPiece& p : plan_staging(c.width, c.height, c.chunk)) {
      too_big += p.bytes() > c.chunk;
      empty += p.bytes() == 0;
      for (size_t r = p.row; r < p.row + p.rows; ++r)
        for (size_t b = p.col; b < p.col + p.width; ++b) {
          if (r < c.height && b < c.width)
            ++seen[r * c.width + b];
          else
            ++outside;
        }
    }
    CHECK(outside == 0);
    CHECK(too_big == 0);
    CHECK(empty == 0);
    CHECK(std::count(seen.begin(), seen.end(), 1) == std::ptrdiff_t(seen.size()));
  }
  CHECK(plan_staging(0, 5, 32).empty());
  CHECK(plan_staging(5, 0, 32).empty());
  // Whole rows when they fit: 10 rows of 8 bytes through 32 bytes are 3 pieces (4 + 4 + 2 rows).
  CHECK(plan_staging(8, 10, 32).size() == 3);
}
