// Printing like numpy, objects like Python, values as nested JSON.
#include <catch2/catch.hpp>

#include "distrun/scenario/output/format.hpp"
#include "distrun/scenario/run/runner.hpp"

using namespace distrun;
using namespace distrun::scenario;

static Tensor make(const Shape& shape, DType dtype, std::vector<double> v) {
  Tensor t = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < v.size(); ++i) t.set(int64_t(i), v[i]);
  return t;
}

TEST_CASE("whole floats print with a dot, padded to one width", "[format]") {
  CHECK(format_values(make({1, 5}, DType::Float32, {60, 60, 60, 60, 60})) == "[[60. 60. 60. 60. 60.]]");
  CHECK(format_values(make({2, 3}, DType::Float32, {0, 1, 10, 2, 3, 12})) == "[[ 0.  1. 10.]\n [ 2.  3. 12.]]");
}

TEST_CASE("integers print without a dot, fractions with 4 decimals", "[format]") {
  CHECK(format_values(make({3}, DType::Int64, {1, -20, 3})) == "[  1 -20   3]");
  CHECK(format_values(make({2}, DType::Float64, {0.5, 0.25})) == "[0.5000 0.2500]");
  CHECK(format_values(make({}, DType::Float32, {7})) == "7.");
}

TEST_CASE("3-d tensors separate blocks with a blank line; long ones are summarised", "[format]") {
  CHECK(format_values(make({2, 1, 2}, DType::Int32, {1, 2, 3, 4})) == "[[[1 2]]\n\n [[3 4]]]");
  Tensor big = Tensor::zeros({2000}, DType::Int32);
  CHECK(format_values(big) == "[0 0 0 ... 0 0 0]");
}

TEST_CASE("values become nested JSON lists", "[format]") {
  CHECK(values_json(make({1, 2}, DType::Float32, {68, 0.5})).dump() == "[[68,0.5]]");
  CHECK(values_json(make({}, DType::Int8, {-3})).dump() == "-3");
  CHECK(values_json(make({2}, DType::Int16, {-32768, 32767})).dump() == "[-32768,32767]");
  CHECK(values_json(make({2}, DType::Bool, {1, 0})).dump() == "[true,false]");
}

TEST_CASE("bool tensors print True and False, as torch does", "[format]") {
  CHECK(format_values(make({3}, DType::Bool, {1, 0, 1})) == "[ True False  True]");
}

TEST_CASE("objects print like Python", "[format]") {
  nlohmann::ordered_json o = {{"rank", 0}, {"ok", true}, {"name", "a'b"}, {"none", nullptr}, {"v", 2.0}};
  CHECK(python_repr(nlohmann::ordered_json::array({o})) ==
        "[{'rank': 0, 'ok': True, 'name': 'a\\'b', 'none': None, 'v': 2.0}]");
}

TEST_CASE("multi-indices for error messages", "[format]") {
  CHECK(index_str({2, 3}, 4) == "[1, 1]");
  CHECK(index_str({5}, 3) == "[3]");
}
