// The reference: every rank's tensors and every step simulated for all ranks in one process
// with plain loops. Running it validates the whole scenario against a world size before any
// collective runs (names, shapes, splits, ranks, dtypes); its per-step results are what the
// runner checks against.
#pragma once
#include <map>
#include <optional>
#include <vector>

#include "distrun/scenario/local_ops.hpp"
#include "distrun/scenario/model.hpp"

namespace distrun::scenario {

/// A tensor with the tolerance its check allows: |got - want| <= ulps * eps(dtype) *
/// max(|want|, scale). ulps = 0 means exact.
struct RefTensor {
  Tensor value;
  double ulps = 0;
  double scale = 0;
  /// Set while a rank's tensor is still what its spec makes (value empty): it is made when a
  /// step reads it and not kept, so a rank's untouched tensors cost no memory here.
  const TensorSpec* spec = nullptr;
};

/// One rank's result of one step (nothing, a tensor, or an object).
struct Expected {
  bool has_result = false;
  std::string name;               // tensor results: the output name
  RefTensor tensor;
  std::optional<nlohmann::ordered_json> object;
};

class Reference {
 public:
  /// Simulates `scenario` for `world_size` ranks, `local_world_size` per node (rank r has
  /// local rank r % local_world_size). Throws ConfigError "file:line:col: ..." for anything
  /// that cannot run.
  Reference(Scenario& scenario, int world_size, int local_world_size);

  /// The result of step `step` on global rank `rank`.
  const Expected& expected(int step, int rank) const { return results_.at(size_t(step)).at(size_t(rank)); }
  /// The tensors of rank `rank` before step 0 (what the runner creates).
  RankEnv env(int rank) const;

  // The helpers each op's simulation (op_table.hpp) is written with.
  using State = std::map<std::string, RefTensor>;
  const Scenario& scenario() const { return sc_; }
  int world_size() const { return world_size_; }
  const State& state(int rank) const { return state_[size_t(rank)]; }
  [[noreturn]] void fail(Mark m, const std::string& msg) const;
  /// ConfigError at `m` when `bytes_per_rank` times the ranks of one host exceed its memory.
  void check_fits(int64_t bytes_per_rank, Mark m, const std::string& what) const;
  std::string where(const Step& s) const;
  /// The global ranks that run `s` (its group's members, else every rank).
  std::vector<int> participants(const Step& s) const;
  /// The index of global rank `global` among `members`; ConfigError at `m` naming `what`.
  int member_index(const Step& s, const std::vector<int>& members, int global, Mark m, const char* what) const;
  /// The step's input on `rank` (a named tensor of that rank, or the inline spec made there).
  RefTensor input(Step& s, int rank);
  /// Tensor `name` of `rank`, made from its spec if still untouched (nullopt: none).
  std::optional<RefTensor> tensor(int rank, const std::string& name) const;
  /// The elementwise reduction of every member's input, reading one input at a time.
  RefTensor reduce_members(Step& s, const std::vector<int>& members);
  void check_reduce(const Step& s, DType dtype) const;
  void require_same_shapes(const Step& s, const std::vector<RefTensor>& in, const std::vector<int>& members,
                           int except_dim) const;
  int check_dim(const Step& s, const Tensor& t) const;
  /// The elementwise reduction of `in`, with the tolerance the backends' orderings need.
  RefTensor reduce_over(const std::vector<RefTensor>& in, ReduceOp op) const;
  void set_result(const Step& s, int rank, const RefTensor& t);
  void set_object(const Step& s, int rank, nlohmann::ordered_json obj);

 private:
  Scenario& sc_;
  int world_size_;
  int local_world_size_;
  std::vector<State> state_;                      // per rank
  std::vector<std::vector<Expected>> results_;    // [step][rank]
};

/// The input as the collectives see it: a scalar takes part as a one-element vector.
Tensor as_vector(const Tensor& t);
/// "1 rank", "4 ranks".
std::string ranks_str(int world);

/// eps of a floating dtype (1 ulp at 1.0); 0 for integers.
double dtype_epsilon(DType t);

/// Counts the elements of `got` that differ from `want` beyond its tolerance; `first` gets
/// the flat index of the first one. A shape or dtype mismatch counts every element wrong.
int64_t count_wrong(const Tensor& got, const RefTensor& want, int64_t* first = nullptr);

}  // namespace distrun::scenario
