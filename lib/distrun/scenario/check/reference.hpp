// The reference: the values each step must produce, computed in one process with plain loops
// from the scenario itself, after the validation (validation.hpp) has checked it. The launcher
// needs no values; a worker needs those of its own results, so it computes only them and what
// they depend on (a reduction reads every member's input, a broadcast only src's, map only the
// rank's own tensors): one pass back through the steps marks what is wanted, one forward
// computes it. Inputs are made from their specs when read and not kept, and a reduction
// streams one member's input at a time, so a worker holds O(its own tensors) more or less.
#pragma once
#include <map>
#include <optional>
#include <vector>

#include "distrun/scenario/check/local_ops.hpp"
#include "distrun/scenario/check/validation.hpp"
#include "distrun/scenario/model/model.hpp"

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
  /// A value this reference did not compute: no result it wants reads it.
  bool unknown = false;
};

/// One rank's result of one step (nothing, a tensor, or an object).
struct Expected {
  bool has_result = false;
  std::string name;  // tensor results: the output name
  RefTensor tensor;
  std::optional<nlohmann::ordered_json> object;
};

class Reference : public WorldView {
 public:
  /// Validates `scenario` for `world_size` ranks, `local_world_size` per node (rank r has
  /// local rank r % local_world_size), then computes the expected results of every rank, or
  /// with `own_rank` only those of that rank. Throws ConfigError "file:line:col: ..." for
  /// anything that cannot run.
  Reference(const Scenario& scenario, int world_size, int local_world_size, std::optional<int> own_rank = std::nullopt);

  /// The result of step `step` on global rank `rank` (empty for a rank not computed).
  const Expected& expected(int step, int rank) const { return results_.at(size_t(step)).at(size_t(rank)); }

  // The helpers each op's simulation (op_table.hpp) is written with.
  using State = std::map<std::string, RefTensor>;
  /// Whether the result of `s` on `rank` is wanted (set_result ignores the others).
  bool wanted(const Step& s, int rank) const { return wanted_[size_t(s.index)][size_t(rank)] != 0; }
  const State& state(int rank) const { return state_[size_t(rank)]; }
  /// The step's input on `rank` (a named tensor of that rank, or the inline spec made there).
  RefTensor input(const Step& s, int rank);
  /// Tensor `name` of `rank`, made from its spec if still untouched (nullopt: none).
  std::optional<RefTensor> tensor(int rank, const std::string& name) const;
  /// The elementwise reduction of every member's input, reading one input at a time, with
  /// the tolerance the backends' orderings need.
  RefTensor reduce_members(const Step& s, const std::vector<int>& members);
  void set_result(const Step& s, int rank, const RefTensor& t);
  void set_object(const Step& s, int rank, nlohmann::ordered_json obj);

 private:
  // Marks, from the last step back, the results `own` needs: its own and those they read.
  void plan(std::optional<int> own);
  std::vector<State> state_;                    // per rank
  std::vector<std::vector<char>> wanted_;       // [step][rank]
  std::vector<std::vector<int>> dropped_;       // [step]: ranks whose result nobody reads
  std::vector<std::vector<Expected>> results_;  // [step][rank]
};

/// The input as the collectives see it: a scalar takes part as a one-element vector.
Tensor as_vector(const Tensor& t);

/// eps of a floating dtype (1 ulp at 1.0); 0 for integers.
double dtype_epsilon(DType t);

/// Counts the elements of `got` that differ from `want` beyond its tolerance; `first` gets
/// the flat index of the first one. A shape or dtype mismatch counts every element wrong.
int64_t count_wrong(const Tensor& got, const RefTensor& want, int64_t* first = nullptr);

}  // namespace distrun::scenario
