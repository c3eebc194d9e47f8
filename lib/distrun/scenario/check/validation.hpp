// Checking a scenario against a world without its values: every rank's tensors are a shape
// and a dtype, and each step's checks that need the world (names, shapes, splits, ranks,
// dtypes, sizes a host can hold) run through its op's `validate` (op_table.hpp). The cost
// grows with ranks times steps, never with the tensors' sizes: this is what the launcher and
// `distrun --check` run before any worker starts, and what each worker runs before it
// computes the expected values of its own results (reference.hpp).
#pragma once
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "distrun/scenario/check/local_ops.hpp"
#include "distrun/scenario/model/model.hpp"

namespace distrun::scenario {

/// What the validation knows of a tensor: no values.
struct TensorMeta {
  Shape shape;
  DType dtype = DType::Float32;
};

/// The world a scenario is checked or simulated for, and the helpers both passes share.
class WorldView {
 public:
  WorldView(const Scenario& sc, int world_size, int local_world_size);
  const Scenario& scenario() const { return sc_; }
  int world_size() const { return world_size_; }
  /// Rank r's place: local rank r % local_world_size.
  RankEnv env(int rank) const;
  [[noreturn]] void fail(Mark m, const std::string& msg) const;
  /// "step 3 (all_reduce)".
  std::string where(const Step& s) const;
  /// The global ranks that run `s` (its group's members, else every rank).
  std::vector<int> participants(const Step& s) const;
  /// The ranks that get a result of `s` (op_table.hpp's result_at; a map's `ranks`).
  std::vector<int> result_ranks(const Step& s) const;

 protected:
  const Scenario& sc_;
  int world_size_;
  int local_world_size_;
};

class Validation : public WorldView {
 public:
  /// Checks `scenario` for `world_size` ranks, `local_world_size` per host. Fill values are
  /// evaluated for every rank while they total at most kFillBudget, else for the first and the
  /// last rank; `own_rank` (a worker's) always has all of its own checked. With `nccl` (the
  /// backend that will run it), also what NCCL cannot do (an int16 collective, a bitwise
  /// reduction), which needs no GPU to know. Throws ConfigError "file:line:col: ..." for
  /// anything that cannot run.
  Validation(const Scenario& scenario, int world_size, int local_world_size, std::optional<int> own_rank = std::nullopt,
             bool nccl = false);

  static constexpr int64_t kFillBudget = int64_t(1) << 22;

  // The helpers each op's validate (op_table.hpp) is written with.
  /// ConfigError at `m` when `bytes_per_rank` times the ranks of one host exceed its memory.
  void check_fits(int64_t bytes_per_rank, Mark m, const std::string& what) const;
  /// The index of global rank `global` among `members`; ConfigError at `m` naming `what`.
  int member_index(const Step& s, const std::vector<int>& members, int global, Mark m, const char* what) const;
  /// The step's input on `rank`; ConfigError when it is not defined there.
  TensorMeta input(const Step& s, int rank);
  /// Every member's input, in member order.
  std::vector<TensorMeta> inputs(const Step& s, const std::vector<int>& members);
  /// Refuses inputs of another dtype or shape than member 0's (but for `except_dim`, -1 for none).
  void require_same_shapes(const Step& s, const std::vector<TensorMeta>& in, const std::vector<int>& members,
                           int except_dim) const;
  /// Tensor `name` on `rank`, or nullptr.
  const TensorMeta* tensor(int rank, std::string_view name) const;
  const TensorMeta* tensor(int rank, Name name) const;
  /// The names defined on `rank`, for did-you-mean.
  std::vector<std::string> names(int rank) const;
  void check_reduce(const Step& s, DType dtype) const;
  /// Whether the scenario is checked for NCCL (the constructor's `nccl`).
  bool nccl() const { return nccl_; }
  /// `s.args().dim`, refused when out of range for `shape` (a scalar counts as one dim).
  int check_dim(const Step& s, const Shape& shape) const;
  /// Refuses a size of `dim` that does not split into `n` equal chunks.
  void require_even_split(const Step& s, const Shape& shape, int dim, int n, const Shape& shown) const;
  void set_result(const Step& s, int rank, const TensorMeta& t);

 private:
  // Evaluates every fill value of `spec` on `rank`: always when the fill does not depend on
  // both the rank and the index (one value per rank, or the same values for every rank of a
  // shape: cheap to cover every rank), else when `rank` is ours or the budget allows.
  void check_fill_values(const TensorSpec& spec, int rank, Origin origin = {});
  // `m`, refused when `s` hands it to a backend that cannot carry its dtype.
  const TensorMeta& on_backend(const Step& s, const TensorMeta& m) const;
  std::optional<int> own_;
  bool nccl_ = false;
  std::set<std::pair<const TensorSpec*, Shape>> fills_checked_;  // rank-independent fills, per shape
  int64_t fill_budget_ = kFillBudget;
  bool sample_fills_ = false;  // the budget cannot cover every rank
  void define(int rank, Name name, const TensorMeta& t);
  // One rank's tensors, by name id: 1 + an index in metas_, 0 for none. A file may name
  // 100 000 results, held by every rank (all_reduce outputs) or by one each (recv outputs in a
  // world of thousands): a rank's table is a hash while it holds few of the names, an array by
  // id (4 bytes a name) once it holds a sixteenth of them, so neither case costs ranks x names.
  struct RankTensors {
    std::unordered_map<uint32_t, uint32_t> few;
    std::vector<uint32_t> by_id;
    uint32_t get(uint32_t id) const;
    void set(uint32_t id, uint32_t meta, size_t names);
  };
  std::vector<RankTensors> state_;
  std::deque<TensorMeta> metas_;  // each shape and dtype once (stable: tensor() points into it)
  std::map<std::pair<Shape, DType>, uint32_t> meta_ids_;
};

/// The input as the collectives see it: a scalar takes part as a one-element vector.
inline Shape as_vector_shape(const Shape& s) { return s.empty() ? Shape{1} : s; }
/// "1 rank", "4 ranks".
std::string ranks_str(int world);

}  // namespace distrun::scenario
