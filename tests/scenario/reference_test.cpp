// Reference semantics: what every op should produce on every rank, and the tolerance rules.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "distrun/scenario/output/json_values.hpp"
#include "distrun/scenario/load/loader.hpp"
#include "distrun/scenario/ops/ops.hpp"
#include "distrun/scenario/check/reference.hpp"
#include "test_util.hpp"

using namespace distrun;
using namespace distrun::scenario;

namespace {
struct Sim {
  Scenario sc;
  std::unique_ptr<Reference> ref;
  Sim(const std::string& text, int world) : sc(load_scenario_text("t.yaml", text)) {
    ref = std::make_unique<Reference>(sc, world, world);
  }
  const Tensor& at(int step, int rank) const { return ref->expected(step, rank).tensor.value; }
  std::vector<double> values(int step, int rank) const {
    std::vector<double> out;
    for (int64_t e = 0; e < at(step, rank).numel(); ++e) out.push_back(at(step, rank).get(e));
    return out;
  }
};
}  // namespace

TEST_CASE("reduce_scatter row-wise: the seed's example", "[reference]") {
  Sim
      s("tensors:\n  x: {shape: [world_size, 5], fill: \"rank*10 + i\"}\n"
        "steps:\n  - {op: reduce_scatter, input: x, output: y, reduce: sum}\n",
        4);
  CHECK(s.at(0, 2).shape() == Shape{1, 5});
  CHECK(s.values(0, 2) == std::vector<double>(5, 68));
  CHECK(s.ref->expected(0, 2).name == "y");
}

TEST_CASE("gather only on dst; column-wise all_gather", "[reference]") {
  Sim
      s("tensors:\n  x: {shape: [2, 1], fill: \"rank*10 + i\"}\n"
        "steps:\n  - {op: gather, input: x, output: g0, dst: 1, dim: 1}\n  - {op: all_gather, input: x, output: g, "
        "dim: 1}\n",
        3);
  CHECK(!s.ref->expected(0, 0).has_result);
  CHECK(s.values(0, 1) == std::vector<double>{0, 10, 20, 1, 11, 21});
  CHECK(s.at(1, 2).shape() == Shape{2, 3});
}

TEST_CASE("uneven all_to_all follows split_sizes per rank", "[reference]") {
  Sim
      s("tensors:\n  x: {shape: [3], fill: \"rank*10 + idx\"}\n"
        "steps:\n  - {op: all_to_all, input: x, split_sizes: [\"rank == 0 ? 1 : 2\", \"rank == 0 ? 2 : 1\"]}\n",
        2);
  // rank 0 sends [0] to 0 and [1, 2] to 1; rank 1 sends [10, 11] to 0 and [12] to 1.
  CHECK(s.values(0, 0) == std::vector<double>{0, 10, 11});
  CHECK(s.values(0, 1) == std::vector<double>{1, 2, 12});
}

TEST_CASE("integer reductions: avg truncates, bitwise ops", "[reference]") {
  Sim
      s("tensors:\n  x: {shape: [1], fill: \"rank + 1\", dtype: int32}\n"
        "steps:\n  - {op: all_reduce, input: x, output: a, reduce: avg}\n"
        "  - {op: all_reduce, input: x, output: b, reduce: bor}\n"
        "  - {op: reduce, input: x, output: p, reduce: prod, dst: 2}\n",
        3);
  CHECK(s.values(0, 0) == std::vector<double>{2});
  CHECK(s.values(1, 1) == std::vector<double>{3});
  CHECK(s.values(2, 2) == std::vector<double>{6});
  CHECK(!s.ref->expected(2, 0).has_result);
}

TEST_CASE("groups: only members run, src is a global rank", "[reference]") {
  Sim
      s("groups:\n  high: [2, 3]\ntensors:\n  x: {shape: [2], fill: rank}\n"
        "steps:\n  - {op: broadcast, group: high, input: x, src: 3}\n  - {op: all_reduce, group: high, input: x}\n",
        4);
  CHECK(!s.ref->expected(0, 0).has_result);
  CHECK(s.values(0, 2) == std::vector<double>{3, 3});
  CHECK(s.values(1, 3) == std::vector<double>{6, 6});  // x is now 3 on both members
}

TEST_CASE("softmax with map and local_reduce", "[reference]") {
  Sim
      s("tensors:\n  x: {shape: [1, 2], fill: \"rank*2 + j\"}\n"
        "steps:\n  - {op: local_reduce, input: x, output: m, reduce: max, dim: 1}\n"
        "  - {op: all_reduce, input: m, reduce: max}\n"
        "  - {op: map, expr: \"exp(x - m)\", output: e}\n"
        "  - {op: local_reduce, input: e, output: s, reduce: sum}\n"
        "  - {op: all_reduce, input: s, reduce: sum}\n"
        "  - {op: map, expr: \"e / s\", output: p}\n",
        2);
  double total = 0;
  for (int r = 0; r < 2; ++r)
    for (double v : s.values(5, r)) total += v;
  CHECK(total == Approx(1.0).epsilon(1e-6));
  CHECK(s.values(5, 1)[1] == Approx(std::exp(0) / (1 + std::exp(-1) + std::exp(-2) + std::exp(-3))).epsilon(1e-6));
  CHECK(s.ref->expected(5, 0).tensor.ulps > 0);  // inexact: sums and exp in float32
}

TEST_CASE("map: 1-element tensors broadcast; ranks filter", "[reference]") {
  Sim
      s("tensors:\n  x: {shape: [3], fill: idx}\n  w: {values: [10]}\n"
        "steps:\n  - {op: map, expr: \"x * w + rank\", output: y, ranks: [1]}\n",
        2);
  CHECK(!s.ref->expected(0, 0).has_result);
  CHECK(s.values(0, 1) == std::vector<double>{1, 11, 21});
}

TEST_CASE("count_wrong: exact for integers, ULP tolerance for inexact floats", "[reference]") {
  RefTensor want{Tensor::zeros({3}, DType::Float32)};
  want.value.set(0, 1.0);
  Tensor got = want.value.clone();
  CHECK(count_wrong(got, want) == 0);
  got.set(0, 1.0 + 1e-6);
  int64_t first = -1;
  CHECK(count_wrong(got, want, &first) == 1);
  CHECK(first == 0);
  want.ulps = 16;  // e.g. after a sum over ranks
  CHECK(count_wrong(got, want) == 0);
  got.set(2, 0.5);
  CHECK(count_wrong(got, want, &first) == 1);
  CHECK(first == 2);
  CHECK(count_wrong(Tensor::zeros({2}, DType::Float32), want) == 3);  // wrong shape: all wrong
}

namespace {
// The world sizes a scenario file runs at in the suite: its declared one, else 2 and 8.
std::vector<int> worlds_of(const Scenario& sc) {
  if (sc.world_size) return {*sc.world_size};
  return {2, 8};
}

// Every expected result of `own` (a worker's Reference) is the one the whole world's gives.
void require_same_expected(const Reference& whole, const Reference& own, const Scenario& sc, int rank) {
  for (const auto& s : sc.steps) {
    INFO("step " << s.index << " (" << op_name(s.op) << ") on rank " << rank);
    const Expected& a = whole.expected(s.index, rank);
    const Expected& b = own.expected(s.index, rank);
    REQUIRE(a.has_result == b.has_result);
    REQUIRE(a.object.has_value() == b.object.has_value());
    if (a.object) CHECK(same_json(*a.object, *b.object));  // nan == nan here
    if (!a.tensor.value.defined()) {
      CHECK(!b.tensor.value.defined());
      continue;
    }
    REQUIRE(b.tensor.value.defined());
    CHECK(a.name == b.name);
    CHECK(a.tensor.value.shape() == b.tensor.value.shape());
    CHECK(a.tensor.value.dtype() == b.tensor.value.dtype());
    CHECK(a.tensor.ulps == b.tensor.ulps);
    CHECK(a.tensor.scale == b.tensor.scale);
    CHECK(std::memcmp(a.tensor.value.data(), b.tensor.value.data(), a.tensor.value.nbytes()) == 0);
  }
}
}  // namespace

TEST_CASE("a worker's own reference gives the whole world's values, for every scenario file", "[reference]") {
  std::vector<std::filesystem::path> files;
  for (const char* dir : {DISTRUN_CONFIGS_DIR, DISTRUN_SCENARIO_DATA})
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
      if (e.path().extension() == ".yaml") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() > 20);
  for (const auto& f : files) {
    for (int world : worlds_of(load_scenario(f.string()))) {
      INFO(f.string() << " at " << world << " ranks");
      Scenario whole_sc = load_scenario(f.string());
      const Reference whole(whole_sc, world, world);
      for (int rank = 0; rank < world; ++rank) {
        Scenario sc = load_scenario(f.string());
        const Reference own(sc, world, world, rank);
        require_same_expected(whole, own, sc, rank);
      }
    }
  }
}

TEST_CASE("a worker's reference computes only what its results depend on", "[reference]") {
  // Rank 1 wants y (broadcast from rank 0's x) and z (its own map): rank 2's map result and
  // rank 0's reduce are not computed, and rank 3's x, which nothing it wants reads, is never made.
  const std::string text =
      "tensors:\n  x: {shape: [2], fill: \"rank\"}\n"
      "steps:\n  - {op: reduce, input: x, output: r, dst: 0}\n  - {op: broadcast, input: x, output: y, src: 0}\n"
      "  - {op: map, expr: \"y + rank\", output: z}\n";
  Scenario sc = load_scenario_text("t.yaml", text);
  const Reference own(sc, 4, 4, 1);
  CHECK(!own.expected(0, 0).has_result);
  CHECK(own.expected(1, 1).tensor.value.get(1) == 0);
  CHECK(own.expected(2, 1).tensor.value.get(0) == 1);
  CHECK(!own.expected(2, 2).has_result);
  CHECK(!own.wanted(sc.steps[0], 0));
  CHECK(own.wanted(sc.steps[1], 1));
  CHECK(!own.wanted(sc.steps[1], 2));
}
