// The one place an op is described. Each OpSpec owns an op's name, the keys a step of it
// accepts (and which of them it must give), its validation (every check that needs the world,
// on shapes and dtypes only), what its results are made from (so a worker computes only what
// its own results need), its simulation for the reference (the values) and its run on one
// rank over a Backend.
// The loader, the reference and the runner hold no per-op switch: they look the op up here.
//
// Adding an op: a value in `enum class Op` (model.hpp), then one OpSpec in the op_*.cpp file
// of its kind in ops/ (op_collectives, op_local, op_objects, op_bench), listed in ops/ops.cpp.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distrun/backend/backend.hpp"
#include "distrun/scenario/model/model.hpp"
#include "distrun/scenario/model/picture.hpp"

namespace distrun::scenario {

class Reference;
class StepRunner;
class Validation;

/// Which members of a step get its result.
enum class ResultAt { Members, Dst, None };
/// What a member's result is made from: nothing (objects, bench), src's input, every member's
/// input, or the tensors of the rank itself (map, local_reduce).
enum class Reads { Nothing, Src, EveryMember, Own };

/// One rank's share of one step: what it prints, its results records and its check failures.
struct StepReport {
  std::string text;
  std::vector<std::string> records;
  std::vector<std::string> problems;
  int64_t wrong = 0;

  nlohmann::ordered_json to_json() const {
    return {{"text", text}, {"records", records}, {"problems", problems}, {"wrong", wrong}};
  }
};

/// What one rank's run of a step produced: a tensor, an object, or (bench) a finished report.
struct StepOutput {
  std::optional<Tensor> tensor;
  std::optional<nlohmann::ordered_json> object;
  std::optional<StepReport> report;
};

struct OpSpec {
  Op op;
  const char* name;
  std::vector<std::string> keys;      // accepted besides op, group, print and check
  std::vector<std::string> required;  // of `keys`, those a step must give
  bool object_result = false;         // the result is a JSON object, not a tensor
  bool whole_tensor_dim = false;      // `dim` absent means over all elements (local_reduce)
  bool local_reduce_ops = false;      // `reduce` limited to sum, avg, prod, min, max
  ResultAt result_at = ResultAt::Members;
  Reads reads = Reads::Nothing;
  /// Every check of `s` that needs the world (ConfigError at the step's marks), on shapes and
  /// dtypes only; records each member's result shape (v.set_result).
  void (*validate)(Validation& v, const Step& s) = nullptr;
  /// The values of the results of `s` the reference wants (ref.set_result / ref.set_object;
  /// ref.wanted(s, rank) says which: a worker wants its own and what they depend on). Runs on
  /// a validated scenario: it checks nothing.
  void (*simulate)(Reference& ref, const Step& s) = nullptr;
  /// This rank's run of `s` on `b` (a member of the step's group).
  StepOutput (*run)(StepRunner& r, const Step& s, Backend& b) = nullptr;
  /// What the printed header adds after the op's name (" (sum)"), or "".
  std::string (*header_detail)(const Step& s) = nullptr;
  /// --explain's picture of who sends what to whom among `members` (nullptr: no data moves).
  Picture (*picture)(const Step& s, const std::vector<int>& members) = nullptr;
};

/// Every op of the format as the layer that runs them describes it (ops/ops.hpp assembles
/// the table): the loader, the checks and --explain look an op up in the table the scenario
/// was loaded with (Scenario::spec), so nothing below ops/ refers to ops/.
class OpTable {
 public:
  /// `specs` in the order the format's documentation lists them.
  explicit OpTable(std::vector<OpSpec> specs) : specs_(std::move(specs)) {}
  const OpSpec& spec(Op op) const;
  std::optional<Op> parse(std::string_view name) const;
  /// Every op name, for did-you-mean suggestions.
  std::vector<std::string> names() const;

 private:
  std::vector<OpSpec> specs_;
};

}  // namespace distrun::scenario
