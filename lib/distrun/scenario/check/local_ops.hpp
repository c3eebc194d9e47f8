// Per-rank computations of a scenario, shared by the runner and the reference simulation:
// creating tensors from specs, map, local_reduce and ${expr} substitution in objects. All
// arithmetic is in double precision, rounded once to the tensor's dtype.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "distrun/scenario/model/model.hpp"

namespace distrun::scenario {

/// Where a rank sits in the job: the names expressions see.
struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
};

/// Values for `e` with rank, world_size, local_rank and local_world_size bound (the rest 0).
Bindings bind_env(const Expression& e, const RankEnv& env);
/// The value of `n` on the rank described by `env`.
double eval_number(const Number& n, const RankEnv& env);

// `origin`: where the spec's marks count from (a step's inline spec: Step::origin()).

/// The shape `spec` has on the rank `env`, without creating the tensor. ConfigError for a
/// negative or fractional entry, or a byte size beyond int64.
Shape spec_shape(const TensorSpec& spec, DType default_dtype, const RankEnv& env, const std::string& file,
                 Origin origin = {});

/// Creates a tensor from `spec` on the rank `env` (CPU). ConfigError (at the spec's marks in
/// `file`) for a negative or fractional shape entry or values that do not fit the shape.
Tensor make_tensor(const TensorSpec& spec, DType default_dtype, const RankEnv& env, const std::string& file,
                   Origin origin = {});

/// Evaluates every value the fill of `spec` gives on `env` and refuses one its dtype cannot
/// hold, as make_tensor does, without creating the tensor. Returns how many were evaluated.
int64_t check_fill(const TensorSpec& spec, DType default_dtype, const RankEnv& env, const std::string& file,
                   Origin origin = {});

/// The tensors named in a map expression: its variables other than the rank and index names.
std::vector<std::string> map_tensor_names(const Expression& e);

/// Evaluates `e` elementwise into a new tensor of `shape` and `dtype`; `inputs` maps each
/// name of map_tensor_names() to a CPU tensor of `shape` or of one element (broadcast). Into
/// an integer dtype a result truncates toward zero; one that is not finite or out of the
/// dtype's range is a ConfigError at `mark` in `file` naming the rank and element.
Tensor apply_map(const Expression& e, const std::map<std::string, Tensor>& inputs, const Shape& shape, DType dtype,
                 const RankEnv& env, const std::string& file, Mark mark);

/// The shape local_reduce produces from `in` (dim absent: over all elements).
Shape local_reduce_shape(const Shape& in, std::optional<int> dim, bool keepdim);
/// torch.sum/mean/prod/amin/amax(x, dim, keepdim) on a CPU tensor (avg of integers truncates;
/// min and max propagate NaN).
Tensor local_reduce(const Tensor& in, ReduceOp op, std::optional<int> dim, bool keepdim);

/// The object with every "${expr}" replaced by its value on `env`; a string that is only
/// "${expr}" becomes a number.
nlohmann::ordered_json substitute_object(const ObjectTemplate& t, const RankEnv& env);

/// Integer elements read and written exactly (no trip through double).
int64_t get_int(const Tensor& t, int64_t flat);
void set_int(Tensor& t, int64_t flat, int64_t value);

}  // namespace distrun::scenario
