// Hostile or careless scenario files: each class is refused by the validation the launcher
// runs before any worker starts, as a ConfigError "file:line:col: message" (exit 2), without
// growing or crashing first.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <sstream>

#include "distrun/scenario/run/api.hpp"
#include "distrun/scenario/output/explain.hpp"
#include "distrun/scenario/check/local_ops.hpp"
#include "distrun/scenario/check/reference.hpp"
#include "distrun/scenario/check/validation.hpp"
#include "test_util.hpp"

using namespace distrun;
using namespace distrun::scenario;
using distrun::scenario::testing::load_error;

namespace {
// The error of validating `text` for `world` ranks, all on one host ("" when it passes).
std::string check_error(const std::string& text, int world) {
  try {
    Scenario sc = load_scenario_text("t.yaml", text);
    Reference ref(sc, world, world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// "a: &a [x]\nb: &b [*a, *a, ...]": every level doubles (or `width`-folds) the one before.
std::string alias_bomb(int levels, int width) {
  std::string s = "steps:\n  - op: all_gather_object\n    object:\n      l0: &l0 [\"lol\"]\n";
  for (int l = 1; l <= levels; ++l) {
    s += "      l" + std::to_string(l) + ": &l" + std::to_string(l) + " [";
    for (int w = 0; w < width; ++w) s += (w ? ", *l" : "*l") + std::to_string(l - 1);
    s += "]\n";
  }
  return s;
}
}  // namespace

TEST_CASE("alias expansion is bounded in count and in depth", "[hostile]") {
  CHECK_THAT(load_error(alias_bomb(9, 10)), Catch::StartsWith("t.yaml:") && Catch::Contains("expands to more than"));
  // Within the node limit (111,111 nodes), but an object of megabytes: refused at the object,
  // since every object collective copies it per rank (the fuzzer's input took 1.3 GB and 10 s).
  std::string strings = alias_bomb(9, 10);
  strings.replace(strings.find("l4: &l4 ["), 9, "l4: &l4 A[");  // level 4 a 50-byte string
  CHECK_THAT(load_error(strings), Catch::StartsWith("t.yaml:") && Catch::Contains("object: more than 65536 bytes"));
  CHECK(load_error(alias_bomb(3, 10)) == "");  // 1,111 nodes, 5 KiB: a fine object
  // Plain nesting too: 100 levels of lists, far below any parser's own guard but above ours.
  CHECK_THAT(load_error("description: " + std::string(100, '[') + std::string(100, ']') + "\nsteps: []\n"),
             Catch::StartsWith("t.yaml:1:") && Catch::Contains("nests deeper than 64"));
}

TEST_CASE("duplicate keys and a second document are errors", "[hostile]") {
  CHECK(load_error("steps: []\nsteps: []\n") == "t.yaml:2:1: duplicate key 'steps'");
  CHECK_THAT(load_error("tensors:\n  x: {shape: [2], shape: [3]}\nsteps: []\n"),
             Catch::StartsWith("t.yaml:2:19: duplicate key 'shape'"));
  CHECK_THAT(load_error("steps: []\n---\nsteps: []\n"),
             Catch::StartsWith("t.yaml:3:") && Catch::Contains("one YAML document"));
}

TEST_CASE("an alias names an anchor before it and outside it", "[hostile]") {
  CHECK(load_error("name: *x\nsteps: []\n") == "t.yaml:1:7: the alias *x has no anchor &x before it");
  // An alias inside its own anchor would make the tree a cycle.
  CHECK(load_error("steps:\n  - op: all_gather_object\n    object: &a [1, *a]\n") ==
        "t.yaml:3:20: the alias *a is inside its own anchor");
  CHECK_THAT(load_error("steps:\n  - op: all_gather_object\n    object: {a: &k [1], *k : 2}\n"),
             Catch::StartsWith("t.yaml:3:25: a mapping key must be a plain name"));
  auto sc = load_scenario_text("t.yaml", "steps:\n  - op: all_gather_object\n    object: {a: &k b, *k : 2}\n");
  CHECK(sc.steps[0].args().more().object.value.dump() == R"({"a":"b","b":2})");
}

TEST_CASE("scalars follow the YAML 1.2 core schema", "[hostile]") {
  // y and n are strings (YAML 1.1's booleans): a flag given as `y` is refused, not read as true.
  CHECK_THAT(load_error("steps:\n  - {op: barrier, print: y}\n"), Catch::Contains("print must be true or false"));
  CHECK(load_error("steps:\n  - {op: barrier, print: False}\n") == "");
  auto sc = load_scenario_text(
      "t.yaml", "steps:\n  - op: all_gather_object\n    object: [n, y, yes, off, ~, 0x10, 1e3, .inf, \"1\"]\n");
  const auto& o = sc.steps[0].args().more().object.value;
  CHECK(o[0] == "n");
  CHECK(o[1] == "y");
  CHECK(o[2] == "yes");
  CHECK(o[3] == "off");
  CHECK(o[4].is_null());
  CHECK(o[5] == 16);
  CHECK(o[6] == 1000.0);
  CHECK(std::isinf(o[7].get<double>()));
  CHECK(o[8] == "1");
}

TEST_CASE("shapes that overflow int64 or no host could hold are refused before allocation", "[hostile]") {
  CHECK_THAT(check_error("tensors:\n  x: {shape: [1000000000000, 1000000000000]}\nsteps: []\n", 2),
             Catch::StartsWith("t.yaml:2:6: shape [1000000000000, 1000000000000]") && Catch::Contains("int64"));
  CHECK_THAT(check_error("tensors:\n  x: {shape: [100000000, 100000000]}\nsteps: []\n", 2),
             Catch::StartsWith("t.yaml:2:6: the tensors of rank 0 up to 'x' need 35.5 PiB per rank"));
  // An inline input, and a result that only all_gather makes too large.
  CHECK_THAT(check_error("steps:\n  - {op: all_reduce, input: {shape: [world_size, 1000000000000]}}\n", 2),
             Catch::StartsWith("t.yaml:2:29: step 0 (all_reduce): the input needs"));
  ::setenv("DISTRUN_HOST_MEMORY", "1M", 1);
  CHECK_THAT(check_error("tensors:\n  x: {shape: [4, 16384]}\nsteps:\n  - {op: all_gather, input: x}\n", 4),
             Catch::StartsWith(
                 "t.yaml:4:5: step 0 (all_gather): the result needs 1.0 MiB per rank; 4 ranks on this host"));
  // The same world spread over 4 hosts fits.
  {
    Scenario sc =
        load_scenario_text("t.yaml", "tensors:\n  x: {shape: [4, 16384]}\nsteps:\n  - {op: all_gather, input: x}\n");
    CHECK_NOTHROW(Reference(sc, 4, 1));
    CHECK_THROWS_AS(Reference(sc, 4, 4), ConfigError);
  }
  ::unsetenv("DISTRUN_HOST_MEMORY");
}

TEST_CASE("bench sizes: bounded lists, sizes a host can hold", "[hostile]") {
  CHECK_THAT(load_error("steps:\n  - {op: bench, collective: all_reduce, bytes: {min: 1K, max: 1G, factor: "
                        "1.0000000000000002}}\n"),
             Catch::StartsWith("t.yaml:2:") && Catch::Contains("sizes; at most 64"));
  CHECK_THAT(check_error("steps:\n  - {op: bench, collective: all_reduce, bytes: [64G]}\n", 4),
             Catch::StartsWith("t.yaml:2:5: step 0 (bench): size 64.0 GiB") && Catch::Contains("more than its"));
}

TEST_CASE("fills and values a dtype cannot hold are refused, as torch refuses them", "[hostile]") {
  CHECK(load_error("tensors:\n  x: {shape: [2], fill: 1e30, dtype: int32}\nsteps: []\n") ==
        "t.yaml:2:25: 1e+30 is out of the range of int32");
  CHECK(load_error("tensors:\n  x: {shape: [2], fill: .nan, dtype: int64}\nsteps: []\n") ==
        "t.yaml:2:25: nan cannot be stored in int64");
  CHECK(load_error("dtype: float16\ntensors:\n  x: {values: [1, 70000]}\nsteps: []\n") ==
        "t.yaml:3:19: 70000 overflows float16");
  CHECK(load_error("tensors:\n  x: {values: [1, 256], dtype: uint8}\nsteps: []\n") ==
        "t.yaml:2:19: 256 is out of the range of uint8");
  CHECK(load_error("tensors:\n  x: {shape: [2], fill: .inf, dtype: float32}\nsteps: []\n") == "");
  CHECK_THAT(check_error("tensors:\n  x: {shape: [3], fill: \"i*100\", dtype: int8}\nsteps: []\n", 1),
             Catch::StartsWith(
                 "t.yaml:2:25: fill 'i*100' gives 200 at index 2 on rank 0: 200 is out of the range of int8"));
  CHECK_THAT(check_error("tensors:\n  x: {shape: [2], fill: \"1/i\", dtype: int32}\nsteps: []\n", 1),
             Catch::Contains("inf cannot be stored in int32"));
}

TEST_CASE("fill values: every rank's within the budget, beyond it the ends and a worker's own", "[hostile]") {
  // int8 holds 127: the fill is bad on rank 200 only, at index 5, so each rank's values
  // differ and must be evaluated one by one.
  const std::string text =
      "tensors:\n  x: {shape: [SIZE], fill: \"rank == 200 && i == 5 ? 1000 : 1\", dtype: int8}\nsteps: []\n";
  auto with_size = [&](int64_t n) {
    std::string t = text;
    return load_scenario_text("t.yaml", t.replace(t.find("SIZE"), 4, std::to_string(n)));
  };
  {
    // 256 ranks of 16 values: within the budget, so the launcher sees rank 200's.
    Scenario sc = with_size(16);
    CHECK_THROWS_WITH(Validation(sc, 256, 1), Catch::Contains("gives 1000 at index 5 on rank 200"));
  }
  {
    // 256 ranks of 64K values: beyond it. The launcher samples (ranks 0 and 255 and what
    // the budget covers), and rank 200's own worker refuses it before joining.
    Scenario sc = with_size(int64_t(1) << 16);
    CHECK_NOTHROW(Validation(sc, 256, 1));
    CHECK_THROWS_WITH(Validation(sc, 256, 1, 200), Catch::Contains("on rank 200"));
    CHECK_THROWS_AS(Reference(sc, 256, 1, 200), ConfigError);
    CHECK_NOTHROW(Reference(sc, 256, 1, 3));
  }
}

TEST_CASE("fills of one value per rank, or the same values on every rank, are checked on every rank", "[hostile]") {
  // Far beyond the budget (256 ranks of 1M values), yet each is cheap to cover: the launcher
  // finds the bad rank, so distrun exits 2 before any worker starts.
  Scenario per_rank = load_scenario_text(
      "t.yaml", "tensors:\n  x: {shape: [1048576], fill: \"rank == 200 ? 1000 : 1\", dtype: int8}\nsteps: []\n");
  CHECK_THROWS_WITH(Validation(per_rank, 256, 1), Catch::Contains("gives 1000 at index 0 on rank 200"));
  Scenario by_index =
      load_scenario_text("t.yaml",
                         "tensors:\n  x: {shape: [\"rank == 200 ? 2000 : 100\"], fill: i, dtype: int8}\nsteps: []\n");
  CHECK_THROWS_WITH(Validation(by_index, 256, 1), Catch::Contains("gives 128 at index 128 on rank 200"));
}

TEST_CASE("an unwritable results path is refused before the run", "[hostile]") {
  const std::string dir = "/tmp/distrun-results-probe-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  const std::string scenario_path = dir + "/s.yaml";
  std::ofstream(scenario_path) << "steps: []\n";
  const Scenario sc = load_scenario(scenario_path);
  const auto refused = [&](const std::string& path) {
    try {
      check_results_path(path, sc);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(refused("/nonexistent-distrun-dir/r.jsonl"), Catch::StartsWith("cannot write the results file"));
  CHECK(refused(dir) == "cannot write the results file '" + dir + "': it is a directory, not a regular file");
  ::mkfifo((dir + "/fifo").c_str(), 0644);
  CHECK(refused(dir + "/fifo") == "cannot write the results file '" + dir + "/fifo': it is a FIFO, not a regular file");
  CHECK(refused("/dev/null") ==
        "cannot write the results file '/dev/null': it is a character device, not a regular file");
  ::symlink("s.yaml", (dir + "/link").c_str());
  CHECK(refused(dir + "/link") ==
        "cannot write the results file '" + dir + "/link': it is a symbolic link (give the file it points to)");
  CHECK(refused(scenario_path) == "cannot write the results file '" + scenario_path + "': it is the scenario file");
  CHECK(refused(dir + "/new.jsonl") == "");
  std::ofstream(dir + "/old.jsonl") << "old\n";
  CHECK(refused(dir + "/old.jsonl") == "");
  // The probes left nothing behind.
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  CHECK(entries == 4);  // s.yaml, fifo, link, old.jsonl
  std::filesystem::remove_all(dir);
}

TEST_CASE("the tolerance follows values through map: exp(s) after a 1-ulp all_reduce difference", "[consistency]") {
  Scenario sc = load_scenario_text("t.yaml",
                                   "tensors:\n  x: {shape: [3], fill: \"20 + 0.1*rank + i\"}\n"
                                   "steps:\n  - {op: all_reduce, input: x, output: s}\n"
                                   "  - {op: map, expr: \"exp(s)\", output: e}\n");
  Reference ref(sc, 4, 4);
  const RefTensor& s = ref.expected(0, 0).tensor;
  const RefTensor& e = ref.expected(1, 0).tensor;
  // What a backend that rounds one addition differently gives: s one float32 ulp off, and
  // exp of that.
  Tensor got_s = s.value.clone(), got_e = e.value.clone();
  for (int64_t k = 0; k < got_s.numel(); ++k) {
    const float moved = std::nextafter(float(s.value.get(k)), 1e30f);
    got_s.set(k, moved);
    got_e.set(k, std::exp(double(moved)));
  }
  CHECK(count_wrong(got_s, s) == 0);
  CHECK(count_wrong(got_e, e) == 0);
  // The check can still fail: a result 1% off is wrong (the bound is per tensor, so the
  // largest element shows it).
  Tensor off = e.value.clone();
  off.set(2, e.value.get(2) * 1.01);
  CHECK(count_wrong(off, e) == 1);
}

TEST_CASE("explain draws who sends what to whom, plain without a terminal", "[explain]") {
  Scenario sc = load_scenario_text("t.yaml",
                                   "tensors:\n  x: {shape: [world_size, 2], fill: rank}\n"
                                   "steps:\n  - {op: reduce_scatter, input: x, output: y}\n"
                                   "  - {op: all_to_all, input: x, output: z, dim: 0}\n"
                                   "  - {op: gather, input: x, output: g, dst: 1, dim: 1}\n");
  std::ostringstream out;
  explain(sc, 2, out, false);
  const std::string text = out.str();
  CHECK_THAT(text, Catch::Contains("step 0: reduce_scatter (sum)  x -> y  (row blocks, dim 0)\n"
                                   "  rank 0:   | 0.0 |  ->  | \u03a3.0 |\n"
                                   "            | 0.1 |\n"
                                   "  rank 1:   | 1.0 |  ->  | \u03a3.1 |\n"
                                   "            | 1.1 |\n"));
  CHECK_THAT(text, Catch::Contains("  rank 1:   | 1.0 |  ->  | 0.1 |\n            | 1.1 |      | 1.1 |\n"));
  CHECK_THAT(text, Catch::Contains("step 2: gather  x -> g  (column blocks, dim 1)\n  rank 0:   | 0 |  ->  (no "
                                   "result)\n  rank 1:   | 1 |  ->  | 0 | 1 |\n"));
  CHECK(text.find('\033') == std::string::npos);
  std::ostringstream coloured;
  explain(sc, 2, coloured, true);
  CHECK_THAT(coloured.str(), Catch::Contains("\033[30;41m 0.0 \033[0m"));  // rank 0's block, red
}

TEST_CASE("explain names every dim, uneven splits and objects as they are", "[explain]") {
  Scenario sc =
      load_scenario_text("t.yaml",
                         "tensors:\n  x: {shape: [2, 2, 2], fill: rank}\n  v: {shape: [3], fill: rank}\n"
                         "steps:\n  - {op: all_gather, input: x, output: g, dim: 2}\n"
                         "  - {op: all_to_all, input: v, output: a, split_sizes: [\"rank + 1\", \"2 - rank\"]}\n"
                         "  - {op: all_gather_object, object: {r: \"${rank}\"}}\n");
  std::ostringstream out;
  explain(sc, 2, out, false);
  const std::string text = out.str();
  CHECK_THAT(text, Catch::Contains("step 0: all_gather  x -> g  (blocks along dim 2, side by side)\n"));
  // Rank 0 sends 1 element to itself and 2 to rank 1; rank 1 sends 2 and 1.
  CHECK_THAT(text, Catch::Contains("  rank 0:   | 0.0(1) |  ->  | 0.0(1) |\n            | 0.1(2) |      | 1.0(2) |\n"));
  CHECK_THAT(text, Catch::Contains("  rank 1:   | 1.0(2) |  ->  | 0.1(2) |\n            | 1.1(1) |      | 1.1(1) |\n"));
  CHECK_THAT(text, Catch::Contains("step 2: all_gather_object  (objects, whole)\n"));
  CHECK_THAT(text, Catch::Contains("step 1: all_to_all  v -> a  (row blocks, dim 0)\n"));
  CHECK_THAT(text, Catch::Contains("(n): the chunk's size along dim 0, from each sender's split_sizes\n"));
}

TEST_CASE("explain --values shows each rank's numbers before and after", "[explain]") {
  Scenario sc = load_scenario_text("t.yaml",
                                   "tensors:\n  x: {shape: [2], fill: \"rank + 1\"}\n"
                                   "steps:\n  - {op: all_reduce, input: x}\n"
                                   "  - {op: broadcast, input: x, src: 1, output: y}\n"
                                   "  - {op: gather_object, object: {r: \"${rank}\"}, dst: 1}\n");
  std::ostringstream out;
  explain(sc, 2, out, false, true);
  const std::string text = out.str();
  CHECK_THAT(text, Catch::Contains("  \u03a3 = sum over ranks elementwise\n  rank 0: [1. 1.]  ->  [3. 3.]\n  rank 1: "
                                   "[2. 2.]  ->  [3. 3.]\n"));
  CHECK_THAT(text, Catch::Contains("  rank 0: [3. 3.]  ->  [3. 3.]\n"));  // after the all_reduce
  CHECK_THAT(text, Catch::Contains("  rank 0: (no result)\n  rank 1: [{'r': 0}, {'r': 1}]\n"));
}

TEST_CASE("a scalar of 30 000 digits is read in one pass", "[hostile]") {
  // std::regex recursed once per character here and overflowed the stack (exit 139).
  const std::string digits(30000, '7');
  CHECK_THAT(load_error("tensors:\n  x: {shape: [2], fill: " + digits + ", dtype: int64}\nsteps: []\n"),
             Catch::StartsWith("t.yaml:2:25: fill: 7777") && Catch::Contains("(30000 bytes) is beyond every dtype"));
  CHECK_THAT(load_error("steps:\n  - {op: all_gather_object, object: [" + digits + "]}\n"),
             Catch::StartsWith("t.yaml:2:38: object: the integer 7777") && Catch::Contains("beyond int64 and uint64"));
  CHECK(load_error("tensors:\n  x: {shape: [2], fill: 1." + std::string(30000, '0') + "}\nsteps: []\n") == "");
  CHECK(load_error("steps:\n  - {op: all_gather_object, object: [0." + digits + "e-3, -" + digits + "e-30000]}\n") ==
        "");
}

TEST_CASE("integers are read exactly, and every count in its own type", "[hostile]") {
  const auto tensor_of = [](const std::string& text) {
    Scenario sc = load_scenario_text("t.yaml", text);
    return make_tensor(sc.tensors.at(0).second, sc.dtype, RankEnv{}, "t.yaml");
  };
  // 2^53 + 1 has no double: a trip through one gives ...992.
  CHECK(
      get_int(tensor_of("tensors:\n  x: {values: [9007199254740993, -9223372036854775808], dtype: int64}\nsteps: []\n"),
              0) == 9007199254740993LL);
  CHECK(get_int(tensor_of("tensors:\n  x: {values: [0, -9223372036854775808], dtype: int64}\nsteps: []\n"), 1) ==
        INT64_MIN);
  CHECK(get_int(tensor_of("tensors:\n  x: {shape: [2], fill: 9223372036854775807, dtype: int64}\nsteps: []\n"), 1) ==
        INT64_MAX);
  CHECK(get_int(tensor_of("tensors:\n  x: {shape: [1], fill: 0x7fffffffffffffff, dtype: long}\nsteps: []\n"), 0) ==
        INT64_MAX);
  CHECK(load_error("tensors:\n  x: {shape: [2], fill: 9223372036854775808, dtype: int64}\nsteps: []\n") ==
        "t.yaml:2:25: 9.223372037e+18 is out of the range of int64");
  CHECK(load_error("tensors:\n  x: {values: [2147483648], dtype: int32}\nsteps: []\n") ==
        "t.yaml:2:16: 2147483648 is out of the range of int32");
  // A rank of 2^32 + 1 must not wrap to rank 1, nor a world of 2^32 + 2 to 2.
  CHECK(load_error("tensors:\n  x: {shape: [2]}\nsteps:\n  - {op: broadcast, input: x, src: 4294967297}\n") ==
        "t.yaml:4:36: src must be at most 2147483647, got 4294967297");
  CHECK(load_error("world_size: 4294967298\nsteps: []\n") ==
        "t.yaml:1:13: world_size must be at most 2147483647, got 4294967298");
  CHECK(load_error("groups:\n  g: [0, 4294967296]\nsteps: []\n") ==
        "t.yaml:2:10: a group member must be at most 2147483647, got 4294967296");
  CHECK(load_error("steps:\n  - {op: all_gather, input: {shape: [2]}, dim: 99999999999999999999}\n") ==
        "t.yaml:2:48: dim: 99999999999999999999 is out of the range of int64");
  CHECK(load_error("steps:\n  - {op: bench, collective: all_reduce, bytes: [1K], iters: 4294967297}\n") ==
        "t.yaml:2:61: iters must be at most 2147483647, got 4294967297");
  // Objects keep int64 and uint64 exactly.
  auto sc =
      load_scenario_text("t.yaml",
                         "steps:\n  - {op: all_gather_object, object: [9007199254740993, 18446744073709551615]}\n");
  CHECK(sc.steps[0].args().more().object.value[0].get<int64_t>() == 9007199254740993LL);
  CHECK(sc.steps[0].args().more().object.value[1].get<uint64_t>() == UINT64_MAX);
}

TEST_CASE("messages are bounded and say what is wrong", "[hostile]") {
  // A name of a megabyte is not echoed whole.
  const std::string big(1 << 20, 'q');
  const std::string e = load_error("steps:\n  - op: " + big + "\n");
  CHECK_THAT(e, Catch::StartsWith("t.yaml:2:9: unknown op 'qqqq") && Catch::Contains("(1048576 bytes)"));
  CHECK(e.size() < 200);
  // Longer than any name or expression needs: refused as the parser meets it.
  CHECK(load_error("name: " + big + "q\nsteps: []\n") ==
        "t.yaml:1:7: a scalar of 1048577 bytes; at most 1048576 are read");
  CHECK(load_error("steps:\n  - op: all_gather_object\n    object: {null: 1}\n") ==
        "t.yaml:3:14: a mapping key must be a name, not null (quote it to mean the word)");
  // A timeout the clock cannot count is refused at check time, not after the workers start.
  CHECK(load_error("timeout: .inf\nsteps: []\n") == "t.yaml:1:10: timeout must be at most 31536000 seconds (a year)");
  CHECK(load_error("timeout: 1e300\nsteps: []\n") == "t.yaml:1:10: timeout must be at most 31536000 seconds (a year)");
  CHECK(load_error("timeout: .nan\nsteps: []\n") == "t.yaml:1:10: timeout must be more than 0 seconds");
}

TEST_CASE("map into an integer dtype refuses a result it cannot hold, naming the rank and element", "[hostile]") {
  // A cast would make NaN 0 (or INT_MIN) on the rank where it happens, silently.
  CHECK(check_error("tensors:\n  x: {shape: [3], fill: i, dtype: int32}\nsteps:\n  - {op: map, expr: \"x / x\", "
                    "output: y}\n",
                    2) == "t.yaml:4:21: map 'x / x' gives nan at element 0 on rank 0: nan cannot be stored in int32");
  CHECK(check_error("tensors:\n  x: {shape: [3], fill: \"rank + i\", dtype: int8}\nsteps:\n"
                    "  - {op: map, expr: \"x * 100\", output: y, ranks: [1]}\n",
                    2) ==
        "t.yaml:4:21: map 'x * 100' gives 200 at element 1 on rank 1: 200 is out of the range of int8");
  CHECK(check_error("tensors:\n  x: {shape: [3], fill: i, dtype: int32}\nsteps:\n  - {op: map, expr: \"x / 2\", "
                    "output: y}\n",
                    2) == "");
}
