// The scenario file as data: what the loader produces and the runner and the reference
// simulation consume. Every element keeps its Mark so later checks can point into the file.
#pragma once
#include <nlohmann/json.hpp>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distrun/backend/types.hpp"
#include "distrun/core/tensor.hpp"
#include "distrun/scenario/model/expression.hpp"
#include "distrun/scenario/model/source.hpp"

namespace distrun::scenario {

enum class Op : uint8_t {
  Broadcast,
  Scatter,
  Gather,
  AllGather,
  Reduce,
  AllReduce,
  ReduceScatter,
  AllToAll,
  SendRecv,
  Barrier,
  Map,
  AllGatherObject,
  GatherObject,
  BroadcastObject,
  Bench,
  LocalReduce
};

/// A tensor's or a group's name, one copy per distinct name in its scenario's Names however
/// many steps use it (a file may name 100 000 results), with a dense id (from 0) for tables
/// indexed by name. Valid while a Scenario sharing its Names lives. A default Name is no name
/// (no group given); its text is "".
class Name {
 public:
  Name() = default;
  std::string_view view() const {
    return entry_ ? std::string_view(reinterpret_cast<const char*>(entry_ + 2), entry_[1]) : std::string_view();
  }
  std::string str() const { return std::string(view()); }
  explicit operator bool() const { return entry_ != nullptr; }
  bool empty() const { return view().empty(); }
  /// Only for a name given (true).
  uint32_t id() const { return entry_[0]; }
  friend bool operator==(const Name& a, std::string_view b) { return a.view() == b; }

 private:
  friend class Names;
  explicit Name(const uint32_t* entry) : entry_(entry) {}
  const uint32_t* entry_ = nullptr;  // in its Names: the id, the size, then the text
};

/// The names of a scenario, each once, end to end in blocks: a short name costs about 40 bytes
/// with its place in the lookup table.
class Names {
 public:
  /// The Name spelled `text`, added when new.
  Name intern(std::string_view text);
  /// The Name spelled `text`, if the scenario has it.
  std::optional<Name> find(std::string_view text) const;
  /// The Name of id `id` (below size()).
  Name name(uint32_t id) const { return Name(by_id_[id]); }
  /// How many there are: every id is below it.
  size_t size() const { return by_id_.size(); }

 private:
  // Where `text` is in table_, or the empty slot where it would go.
  size_t slot(std::string_view text) const;
  const uint32_t* store(std::string_view text);
  std::vector<const uint32_t*> by_id_;               // each name's entry in blocks_
  std::vector<uint32_t> table_;                      // open addressing, 1 + id (0: empty), at most half full
  std::vector<std::unique_ptr<uint32_t[]>> blocks_;  // stable: Names point into them
  uint32_t* next_ = nullptr;                         // the first free word of the last block
  size_t room_ = 0;                                  // and how many are free
};

/// A number written as a literal: an integer exactly (never through a double), or a real.
struct Literal {
  double real = 0;
  std::optional<int64_t> integer;  // set when written as an integer within int64
};

/// The entries of `values`, 8 bytes and a bit each (a file may list a million): an integer's
/// bits or a real's, told apart by the bit. An integer's real is the integer rounded, as the
/// loader reads it.
class Literals {
 public:
  void reserve(size_t n) {
    bits_.reserve(n);
    integer_.reserve(n);
  }
  void push_back(const Literal& l);
  size_t size() const { return bits_.size(); }
  Literal operator[](size_t i) const;

 private:
  std::vector<uint64_t> bits_;
  std::vector<bool> integer_;
};

/// A number written either as a literal or as an expression string.
struct Number {
  double value = 0;
  std::optional<int64_t> integer;          // a literal integer, exact
  std::shared_ptr<const Expression> expr;  // set when written as an expression
  Mark mark;
};

/// A tensor spec: shape + fill, or literal values.
struct TensorSpec {
  Mark mark;
  bool has_shape = false;
  std::vector<Number> shape;
  Number fill;  // default 0
  bool has_values = false;
  Literals values;             // flattened, row-major
  Shape values_shape;          // the nesting of `values` ([] for a scalar)
  std::optional<DType> dtype;  // default: the scenario's
};

/// A step input: a tensor's name (Step::input), or an inline spec.
struct TensorRef {
  std::shared_ptr<TensorSpec> spec;  // set for an inline spec
  Mark mark;
};

/// An object step's value, with `${expr}` strings compiled at load time.
struct ObjectTemplate {
  nlohmann::ordered_json value;
  std::vector<std::pair<std::string, std::shared_ptr<const Expression>>> exprs;  // by source text
  Mark mark;
};

struct BenchSpec {
  Op collective = Op::AllReduce;
  std::vector<int64_t> bytes;
  std::optional<DType> dtype;
  ReduceOp reduce = ReduceOp::Sum;
  int iters = 20;
  int warmup = 5;
  int root = 0;
};

/// The arguments of a step that few steps give (split sizes, a map's, an object, a bench), out
/// of StepArgs so that steps that differ in their common arguments (each its own `src`) stay
/// small.
struct StepMore {
  bool has_split_sizes = false;
  std::vector<Number> split_sizes;
  Mark split_mark;
  std::shared_ptr<const Expression> expr;  // map
  Mark expr_mark;
  std::optional<std::vector<int>> ranks;
  Mark ranks_mark;
  std::optional<DType> dtype;  // map: the output's dtype
  ObjectTemplate object;
  BenchSpec bench;
};

/// Everything a step says besides its op, place, names and print/check flags. Kept behind one
/// pointer, absent for a step that gives nothing more (a barrier), so a file of hundreds of
/// thousands of small steps stays small once loaded. Its marks (those of its inline spec and
/// split sizes too) count lines from the step's own line, and the names it uses are the
/// Step's, so that steps written alike but for their names share one StepArgs wherever they
/// stand: `Step::at` gives the file's mark.
struct StepArgs {
  Mark group_mark;

  TensorRef input;
  bool has_input = false;
  Mark output_mark;
  int dim = 0;
  Mark dim_mark;
  std::optional<int> local_dim;  // local_reduce: absent = over all elements
  bool keepdim = true;
  ReduceOp reduce = ReduceOp::Sum;
  bool has_reduce = false;
  Mark reduce_mark;
  int src = 0, dst = 0;
  Mark src_mark, dst_mark;
  bool async = false;
  /// What few steps give: a step that gives none of it holds none.
  const StepMore& more() const { return rare ? *rare : kNoMore; }
  std::unique_ptr<const StepMore> rare;

 private:
  static const StepMore kNoMore;
};

struct Step {
  Op op = Op::Barrier;
  bool print = true;
  bool check = true;
  int index = 0;  // position in steps, from 0
  Mark mark;
  const StepArgs* given = nullptr;  // in its Scenario's step_args; null: every argument at its default
  Name input;                       // the input tensor's; none for an inline input or none at all
  Name output;                      // the result's: the output given, else the input's name, else the op's
  Name group;                       // none: the world

  const StepArgs& args() const { return given ? *given : kDefaultArgs; }
  /// A mark of args() as a mark in the file.
  Mark at(Mark in_args) const { return origin().at(in_args); }
  /// Where args()'s marks count from, for the functions that take a spec (local_ops.hpp).
  Origin origin() const { return {mark.line}; }

 private:
  static const StepArgs kDefaultArgs;
};

class OpTable;
struct OpSpec;

struct Group {
  std::string name;
  std::vector<int> members;  // global ranks, ascending
  Mark mark;
};

struct Scenario {
  std::string file;
  std::string name;
  std::optional<int> world_size;
  Mark world_size_mark;
  std::string backend = "auto";
  std::string device = "cpu";
  DType dtype = DType::Float32;
  double timeout_seconds = 30;
  std::vector<Group> groups;
  std::vector<std::pair<std::string, TensorSpec>> tensors;
  std::vector<Step> steps;
  /// The names the tensors, steps and groups use, and the arguments of the steps (steps
  /// written alike share one): a copy of the scenario shares them.
  std::shared_ptr<Names> names = std::make_shared<Names>();
  std::shared_ptr<std::deque<StepArgs>> step_args = std::make_shared<std::deque<StepArgs>>();

  const OpTable* ops = nullptr;  // the table the scenario was loaded with (op_table.hpp)

  const Group* find_group(std::string_view name) const;
  /// The description of `op` in `ops`.
  const OpSpec& spec(Op op) const;
};

}  // namespace distrun::scenario
