// What an op's run (op_table.hpp) sees of the rank running it: the rank's place, its named
// tensors, the step's input and the reference's expectation (for receive buffers' shapes).
#pragma once
#include <iostream>
#include <memory>
#include <string>

#include "distrun/scenario/check/local_ops.hpp"
#include "distrun/scenario/check/reference.hpp"

namespace distrun::scenario {

class ResultsFile;

/// How this rank runs a scenario: what the command line and the launcher decided.
struct RunSettings {
  std::string results_path;                   // empty: no results file
  std::shared_ptr<ResultsFile> results_file;  // opened early by the caller (rank 0), else opened here
  int local_rank = 0;
  int local_world_size = 1;
  Device device = Device::cpu();      // where the tensors live
  std::string backend_name = "gloo";  // for bench rows
  std::ostream* out = &std::cout;     // rank 0's results
  std::ostream* err = &std::cerr;     // rank 0's check failures
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  /// This rank in the world.
  virtual int rank() const = 0;
  virtual const Scenario& scenario() const = 0;
  virtual const RankEnv& env() const = 0;
  virtual const RunSettings& settings() const = 0;
  /// The step's input on this rank, on the run's device.
  virtual Tensor input(const Step& s) = 0;
  /// A tensor this rank holds by name.
  virtual const Tensor& tensor(const std::string& name) const = 0;
  /// The reference's result of `s` on this rank.
  virtual const Expected& expected(const Step& s) const = 0;
  /// An uninitialised tensor of the expected result's shape and dtype, on the run's device.
  virtual Tensor empty_like_expected(const Step& s) const = 0;
};

/// "step 3 (all_reduce)", for messages.
std::string step_where(const Step& s);

/// A CPU copy of a tensor that may live on a GPU.
Tensor to_cpu(const Tensor& t);

}  // namespace distrun::scenario
