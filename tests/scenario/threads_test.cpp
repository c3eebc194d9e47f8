// Whole scenarios with ranks as threads over a HashStore and Gloo: output in rank order,
// results file records, and the check catching a planted wrong all_reduce result.
#include <fstream>
#include <sstream>
#include <thread>

#include "distrun/gloo/gloo_backend.hpp"
#include "distrun/scenario/check/reference.hpp"
#include "distrun/scenario/run/runner.hpp"
#include "distrun/store/hash_store.hpp"
#include "test_util.hpp"

using namespace distrun;
using namespace distrun::scenario;

namespace {

// Forwards to a real backend, but adds 1 to the first element of every float32 all_reduce
// result on `bad_rank`: a planted wrong result that the check must catch.
class BrokenAllReduce : public Backend {
 public:
  BrokenAllReduce(std::shared_ptr<Backend> inner, int bad_rank)
      : Backend(inner->rank(), inner->size(), inner->global_ranks()), inner_(std::move(inner)), bad_rank_(bad_rank) {}
  std::string name() const override { return "broken"; }
  void run(const CollectiveOp& op) override {
    inner_->run(op);
    if (op.kind != CollectiveKind::AllReduce || rank() != bad_rank_) return;
    Tensor& t = *op.out;
    if (t.dtype() == DType::Float32) t.set(0, t.get(0) + 1);
  }

 private:
  std::shared_ptr<Backend> inner_;
  int bad_rank_;
};

struct RunResult {
  std::vector<int> codes;
  std::string out, err;
};

// Runs `text` on `world` thread ranks; `bad_rank` >= 0 plants a wrong all_reduce there.
RunResult run_threads(const std::string& text, int world, int bad_rank = -1, const std::string& results = "") {
  auto store = std::make_shared<HashStore>();
  RunResult res;
  res.codes.assign(size_t(world), -1);
  std::ostringstream out, err;
  std::vector<std::thread> threads;
  // One loaded scenario for every rank: it is const and its expressions evaluate from any thread.
  const Scenario sc = load_scenario_text("t.yaml", text);
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      Reference ref(sc, world, world, r);
      GlooBackendOptions go;
      go.timeout = std::chrono::seconds(30);
      std::shared_ptr<Backend> b = std::make_shared<GlooBackend>(store, r, world, go);
      if (bad_rank >= 0) b = std::make_shared<BrokenAllReduce>(b, bad_rank);
      RunSettings s;
      s.results_path = results;
      s.local_rank = r;
      s.local_world_size = world;
      std::ostringstream mine_out, mine_err;
      s.out = &mine_out;
      s.err = &mine_err;
      res.codes[size_t(r)] = run_scenario(sc, ref, b, s);
      if (r == 0) {
        out << mine_out.str();
        err << mine_err.str();
      }
    });
  for (auto& t : threads) t.join();
  res.out = out.str();
  res.err = err.str();
  return res;
}

const char* kAllReduce =
    "name: planted\n"
    "tensors:\n  x: {shape: [2, 3], fill: \"rank + idx\"}\n"
    "steps:\n  - {op: all_reduce, input: x, output: y, reduce: sum}\n  - {op: barrier}\n";

}  // namespace

TEST_CASE("a correct run passes and prints every rank in order", "[threads]") {
  auto r = run_threads(kAllReduce, 3);
  CHECK(r.codes == std::vector<int>{0, 0, 0});
  CHECK(r.out ==
        "Rank 0 after all_reduce (sum): y shape [2, 3]\n[[ 3.  6.  9.]\n [12. 15. 18.]]\n"
        "Rank 1 after all_reduce (sum): y shape [2, 3]\n[[ 3.  6.  9.]\n [12. 15. 18.]]\n"
        "Rank 2 after all_reduce (sum): y shape [2, 3]\n[[ 3.  6.  9.]\n [12. 15. 18.]]\n");
  CHECK(r.err.empty());
}

TEST_CASE("the check catches a planted wrong all_reduce result", "[threads]") {
  auto r = run_threads(kAllReduce, 3, /*bad_rank=*/1);
  CHECK(r.codes == std::vector<int>{1, 1, 1});  // every rank fails the run
  CHECK_THAT(r.err, Catch::Contains("check failed: step 0 (all_reduce) on rank 1: 1 of 6 elements of 'y' wrong; "
                                    "first at index [0, 0]: got 4, expected 3"));
}

TEST_CASE("the results file holds one sorted record per step and rank with a result", "[threads]") {
  const std::string path = "/tmp/distrun_scenario_threads_results.jsonl";
  auto r = run_threads(
      "name: res\ntensors:\n  x: {shape: [1, 2], fill: rank}\n"
      "steps:\n  - {op: reduce, input: x, dst: 1}\n  - {op: all_gather_object, object: {r: \"${rank}\"}}\n",
      2, -1, path);
  CHECK(r.codes == std::vector<int>{0, 0});
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  REQUIRE(lines.size() == 3);
  CHECK(
      lines[0] ==
      R"({"scenario":"res","step":0,"op":"reduce","rank":1,"name":"x","shape":[1,2],"dtype":"float32","values":[[1,1]],"wrong":0})");
  CHECK(lines[1] ==
        R"({"scenario":"res","step":1,"op":"all_gather_object","rank":0,"object":[{"r":0},{"r":1}],"wrong":0})");
  CHECK(lines[2] ==
        R"({"scenario":"res","step":1,"op":"all_gather_object","rank":1,"object":[{"r":0},{"r":1}],"wrong":0})");
  std::remove(path.c_str());
}

TEST_CASE("bench on threads: rows with nccl-tests columns and no wrong elements", "[threads]") {
  auto r =
      run_threads("steps:\n  - {op: bench, collective: reduce_scatter, bytes: [1K, 4K], iters: 2, warmup: 1}\n", 2);
  CHECK(r.codes == std::vector<int>{0, 0});
  // nccl-tests' layout: titles, units, then size, count (each rank's part), type, redop, root and the
  // out-of-place columns (reduce_scatter's native placement; in-place reads N/A here).
  CHECK_THAT(r.out, Catch::Contains("busbw  #wrong") && Catch::Contains("(B)    (elements)"));
  CHECK_THAT(r.out, Catch::Contains("        1024           128     float     sum      -1"));
  CHECK_THAT(r.out, Catch::Contains("# Avg bus bandwidth"));
}
