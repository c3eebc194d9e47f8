// Runs a scenario on this rank over a Backend: creates the groups, executes every step,
// checks each result against the Reference, and has rank 0 print every rank's results in
// rank order and write the results file.
#pragma once
#include <memory>
#include <string>

#include "distrun/backend/backend.hpp"
#include "distrun/scenario/check/reference.hpp"
#include "distrun/scenario/ops/step_runner.hpp"

namespace distrun::scenario {

/// Runs `scenario` (already validated by `reference`) as world->rank(). Collective: every
/// rank of `world` must call it. Returns 0 when every check passed on every rank, else 1.
int run_scenario(const Scenario& scenario, const Reference& reference, const std::shared_ptr<Backend>& world,
                 const RunSettings& settings);

/// "[1, 3]": the multi-index of flat element `flat` of `shape`.
std::string index_str(const Shape& shape, int64_t flat);

}  // namespace distrun::scenario
