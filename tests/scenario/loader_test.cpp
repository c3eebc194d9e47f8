// Loader errors point at file:line:col, before anything runs.
#include <cstdio>
#include <fstream>

#include "distrun/scenario/run/api.hpp"
#include "distrun/scenario/check/reference.hpp"
#include "test_util.hpp"

using namespace distrun;
using namespace distrun::scenario;
using distrun::scenario::testing::load_error;

TEST_CASE("loads a valid scenario with defaults", "[loader]") {
  auto sc = load_scenario_text("dir/reduce_scatter_row.yaml",
                               "tensors:\n  x: {shape: [world_size, 5], fill: \"rank*10 + i\"}\n"
                               "steps:\n  - op: reduce_scatter\n    input: x\n    output: y\n");
  CHECK(sc.name == "reduce_scatter_row");
  CHECK(sc.dtype == DType::Float32);
  REQUIRE(sc.steps.size() == 1);
  CHECK(sc.steps[0].op == Op::ReduceScatter);
  CHECK(sc.steps[0].args().reduce == ReduceOp::Sum);
  CHECK(sc.steps[0].output == "y");
  CHECK(sc.steps[0].print);
  CHECK(sc.steps[0].check);
}

TEST_CASE("YAML syntax errors carry line and column", "[loader]") {
  CHECK_THAT(load_error("steps:\n  - op: [barrier\n"), Catch::StartsWith("t.yaml:3:"));
  CHECK_THAT(load_error("steps:\n  - op: [barrier\n"), Catch::Contains("YAML syntax error"));
}

TEST_CASE("unknown ops and keys are errors with a suggestion", "[loader]") {
  CHECK(load_error("steps:\n  - op: all_reduse\n    input: {shape: [2]}\n") ==
        "t.yaml:2:9: unknown op 'all_reduse' (did you mean 'all_reduce'?)");
  CHECK(load_error("steps:\n  - op: barrier\n    grop: a\n") ==
        "t.yaml:3:5: unknown key 'grop' in barrier step (did you mean 'group'?)");
  CHECK_THAT(load_error("stepz: []\n"),
             Catch::StartsWith("t.yaml:1:1: unknown key 'stepz' in the scenario (did you mean 'steps'?)"));
  CHECK_THAT(load_error("tensors:\n  x: {shap: [2]}\nsteps: []\n"),
             Catch::StartsWith("t.yaml:2:7: unknown key 'shap' in tensor spec (did you mean 'shape'?)"));
}

TEST_CASE("bad expressions are errors at load time, pointing into the expression", "[loader]") {
  CHECK_THAT(load_error("tensors:\n  x: {shape: [2], fill: \"rank +* 2\"}\nsteps: []\n"),
             Catch::StartsWith("t.yaml:2:32: bad expression 'rank +* 2'"));
  CHECK_THAT(load_error("tensors:\n  x: {shape: [2], fill: \"rnak\"}\nsteps: []\n"),
             Catch::Contains("unknown name 'rnak'") && Catch::Contains("did you mean 'rank'"));
  CHECK_THAT(load_error("steps:\n  - op: all_gather_object\n    object: {a: \"${rank +}\"}\n"),
             Catch::StartsWith("t.yaml:3:") && Catch::Contains("bad expression 'rank +'"));
}

TEST_CASE("bad values are errors", "[loader]") {
  CHECK_THAT(load_error("tensors:\n  x: {shape: [2], dtype: flaot32}\nsteps: []\n"),
             Catch::StartsWith("t.yaml:2:26: unknown dtype 'flaot32' (did you mean 'float32'?)"));
  CHECK_THAT(load_error("tensors:\n  x: {values: [[1, 2], [3]]}\nsteps: []\n"), Catch::Contains("not rectangular"));
  CHECK_THAT(load_error("steps:\n  - op: all_reduce\n    input: x\n    reduce: summ\n"),
             Catch::StartsWith("t.yaml:4:13: unknown reduce op 'summ' (did you mean 'sum'?)"));
  CHECK_THAT(load_error("steps:\n  - op: send_recv\n    input: x\n    src: 0\n"),
             Catch::Contains("send_recv needs dst"));
  CHECK_THAT(load_error("steps:\n  - op: barrier\n    group: nope\n"),
             Catch::StartsWith("t.yaml:3:12: unknown group 'nope'"));
  CHECK_THAT(load_error("world_size: two\nsteps: []\n"),
             Catch::StartsWith("t.yaml:1:13: world_size must be an integer"));
}

TEST_CASE("int16 and bool values are exact and in range; bool takes true and false", "[loader]") {
  CHECK(load_error("tensors:\n  x: {dtype: int16, values: [-32768, 32767]}\nsteps: []\n") == "");
  CHECK_THAT(load_error("tensors:\n  x: {dtype: short, values: [32768]}\nsteps: []\n"),
             Catch::StartsWith("t.yaml:2:30: 32768 is out of the range of int16"));
  CHECK(load_error("tensors:\n  x: {dtype: bool, values: [true, false, 0, 1]}\n  y: {shape: [2], dtype: bool, "
                   "fill: true}\nsteps: []\n") == "");
  CHECK_THAT(load_error("tensors:\n  x: {dtype: bool, values: [true, 2]}\nsteps: []\n"),
             Catch::StartsWith("t.yaml:2:35: 2 is out of the range of bool"));
  CHECK_THAT(load_error("tensors:\n  x: {dtype: int8, values: [true]}\nsteps: []\n"),
             Catch::StartsWith("t.yaml:2:29: each entry of values must be a number"));
}

// Loads `text` and simulates it for `world` ranks; returns the ConfigError message or "".
static std::string world_error(const std::string& text, int world) {
  try {
    auto sc = load_scenario_text("t.yaml", text);
    Reference ref(sc, world, world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("checks against the world size before anything runs", "[loader][reference]") {
  const std::string rs = "tensors:\n  x: {shape: [5, 2]}\nsteps:\n  - op: reduce_scatter\n    input: x\n";
  CHECK(world_error(rs, 5) == "");
  CHECK_THAT(world_error(rs, 2), Catch::StartsWith("t.yaml:5:12: step 0 (reduce_scatter): size 5 of dim 0"));
  CHECK_THAT(world_error("steps:\n  - op: all_reduce\n    input: y\n", 2),
             Catch::StartsWith("t.yaml:3:12: step 0 (all_reduce): tensor 'y' is not defined on rank 0"));
  CHECK_THAT(world_error("tensors:\n  x: {shape: [2]}\nsteps:\n  - op: broadcast\n    input: x\n    src: 4\n", 4),
             Catch::StartsWith("t.yaml:6:10: step 0 (broadcast): src 4 is out of range for a world of 4 ranks"));
  CHECK_THAT(world_error("groups:\n  g: [0, 3]\nsteps: []\n", 2), Catch::StartsWith("t.yaml:2:6: group 'g': member 3"));
  CHECK_THAT(world_error("tensors:\n  x: {shape: [2]}\nsteps:\n  - op: all_reduce\n    input: x\n    reduce: band\n",
                         2),
             Catch::StartsWith("t.yaml:6:13: step 0 (all_reduce): reduce op 'band' needs an integer or bool dtype"));
  CHECK_THAT(world_error("tensors:\n  x: {shape: [2], dtype: bool}\nsteps:\n  - op: all_reduce\n    input: x\n    "
                         "reduce: avg\n",
                         2),
             Catch::StartsWith("t.yaml:6:13: step 0 (all_reduce): reduce op 'avg' is not defined for bool"));
  CHECK_THAT(world_error("tensors:\n  x: {shape: [2], dtype: bool, fill: \"0.5\"}\nsteps: []\n", 2),
             Catch::Contains("0.5 is out of the range of bool"));
  CHECK_THAT(world_error("tensors:\n  x: {shape: [2], dtype: bool}\nsteps:\n  - {op: local_reduce, input: x}\n", 2),
             Catch::Contains("local_reduce of a bool tensor"));
  CHECK(world_error("tensors:\n  x: {shape: [2], dtype: int32}\nsteps:\n  - op: all_reduce\n    input: x\n    reduce: "
                    "band\n",
                    2) == "");
  CHECK_THAT(world_error("world_size: 4\nsteps: []\n", 2),
             Catch::StartsWith("t.yaml:1:13: the scenario declares world_size 4 but the launched world has 2 ranks"));
  CHECK_THAT(world_error("tensors:\n  x: {shape: [3]}\nsteps:\n  - op: map\n    expr: \"x + y\"\n    output: z\n", 2),
             Catch::Contains("'y' in expr is not a tensor"));
  CHECK_THAT(world_error("tensors:\n  x: {shape: [4, 2]}\nsteps:\n  - op: all_to_all\n    input: x\n    split_sizes: "
                         "[1, 2]\n",
                         2),
             Catch::Contains("split_sizes add up to 3 on rank 0 but dim 0 has 4"));
}

TEST_CASE("non-UTF-8 files and unreadable files are errors", "[loader]") {
  const std::string path = "/tmp/distrun_scenario_latin1_test.yaml";
  {
    std::ofstream f(path, std::ios::binary);
    f << "name: caf\xe9\nsteps: []\n";
  }
  try {
    load_scenario(path);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == path + ":1:10: the file is not valid UTF-8 (bad byte 0xe9)");
  }
  std::remove(path.c_str());
  CHECK_THROWS_AS(load_scenario("/nonexistent/x.yaml"), ConfigError);
}

TEST_CASE("scenario_world_size reports the declared size", "[loader]") {
  const std::string path = "/tmp/distrun_scenario_ws_test.yaml";
  {
    std::ofstream f(path);
    f << "world_size: 3\nsteps: []\n";
  }
  const Scenario sc = load_scenario(path);
  CHECK(sc.world_size == 3);
  CHECK_NOTHROW(check_scenario(sc, 3));
  CHECK_THROWS_AS(check_scenario(sc, 2), ConfigError);
  std::remove(path.c_str());
}

// The memory a long file costs once loaded is its steps': a Step is a few words (its names
// point to one copy of each), and the arguments of a step that gives none (a barrier) are not
// stored at all.
TEST_CASE("a step is small and a barrier holds no arguments", "[loader]") {
  CHECK(sizeof(Step) <= 48);
  const Scenario sc = load_scenario_text("m.yaml", R"(
groups: {g: [0]}
steps:
  - op: barrier
  - {op: barrier, print: false}
  - {op: barrier, group: g}
)");
  REQUIRE(sc.steps.size() == 3);
  CHECK(sc.steps[0].given == nullptr);
  CHECK(sc.steps[1].given == nullptr);
  CHECK_FALSE(sc.steps[1].print);
  REQUIRE(sc.steps[2].given != nullptr);
  CHECK(sc.steps[2].group == "g");
  CHECK_FALSE(sc.steps[0].group);
}

// Steps written alike share one StepArgs (their marks count from their own line), and each
// still reports its own line: the second reduce_scatter finds y too small, on line 4.
TEST_CASE("steps written alike share their arguments and keep their own lines", "[loader]") {
  auto check_error = [](const std::string& text, int world) -> std::string {
    try {
      check_scenario(load_scenario_text("a.yaml", text), world);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  const std::string text =
      "tensors: {y: {shape: [2]}}\nsteps:\n"
      "  - {op: reduce_scatter, input: y}\n"
      "  - {op: reduce_scatter, input: y}\n";
  const Scenario sc = load_scenario_text("a.yaml", text);
  REQUIRE(sc.steps.size() == 2);
  CHECK(sc.steps[0].given == sc.steps[1].given);
  CHECK(sc.steps[0].at(sc.steps[0].args().input.mark).line == 3);
  CHECK(sc.steps[1].at(sc.steps[1].args().input.mark).line == 4);
  CHECK_THAT(check_error(text, 2), Catch::StartsWith("a.yaml:4:33: step 1 (reduce_scatter): size 1 of dim 0"));
  // An inline spec's marks count from its step's line too.
  CHECK_THAT(check_error("steps:\n  - op: barrier\n  - {op: all_reduce, input: {shape: [\"rank - 1\"]}}\n", 2),
             Catch::StartsWith("a.yaml:3:38: a shape entry must be a whole number of 0 or more, got -1 on rank 0"));
}

// Steps that differ only in their names share their arguments too (a file of 100 000 results
// named apart holds one), and each keeps its own names: the last step's error names its input
// at its own line.
TEST_CASE("steps alike but for their names share arguments and keep their names", "[loader]") {
  const std::string text =
      "tensors: {x: {shape: [2]}, w: {shape: [2]}}\ngroups: {g: [0, 1], h: [0]}\nsteps:\n"
      "  - {op: all_reduce, input: x, output: a1, group: g}\n"
      "  - {op: all_reduce, input: w, output: a2, group: h}\n"
      "  - {op: all_reduce, input: x}\n"
      "  - {op: all_reduce, input: q, output: a3, group: g}\n";
  const Scenario sc = load_scenario_text("n.yaml", text);
  REQUIRE(sc.steps.size() == 4);
  CHECK(sc.steps[0].given == sc.steps[1].given);
  CHECK(sc.steps[0].given == sc.steps[3].given);
  CHECK(sc.steps[1].input == "w");
  CHECK(sc.steps[1].output == "a2");
  CHECK(sc.steps[1].group == "h");
  CHECK(sc.steps[2].output == "x");  // the input's name when no output is given
  CHECK_FALSE(sc.steps[2].group);
  CHECK(sc.names->size() == 8);  // x w g a1 h a2 q a3, each once
  CHECK(sc.names->find("a2")->id() == sc.steps[1].output.id());
  CHECK_FALSE(sc.names->find("a4"));
  CHECK_THROWS_WITH(check_scenario(sc, 2),
                    Catch::StartsWith("n.yaml:7:29: step 3 (all_reduce): tensor 'q' is not defined on rank 0"));
}
