// Runs a scenario on this rank over a Backend: creates the groups, executes every step,
// checks each result against the Reference, and has rank 0 print every rank's results in
// rank order and write the results file.
#pragma once
#include <iostream>
#include <memory>
#include <string>

#include "distrun/backend/backend.hpp"
#include "distrun/scenario/reference.hpp"

namespace distrun::scenario {

class ResultsFile;

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

/// Runs `scenario` (already validated by `reference`) as world->rank(). Collective: every
/// rank of `world` must call it. Returns 0 when every check passed on every rank, else 1.
int run_scenario(const Scenario& scenario, const Reference& reference, const std::shared_ptr<Backend>& world,
                 const RunSettings& settings);

/// "[1, 3]": the multi-index of flat element `flat` of `shape`.
std::string index_str(const Shape& shape, int64_t flat);

}  // namespace distrun::scenario
