// The scenario layer's entry points, used by distrun-worker and by the launcher (which
// validates a scenario before any worker starts).
#pragma once
#include <optional>
#include <ostream>
#include <string>

namespace distrun {

/// Loads `path` and validates everything that can be checked before running, for a world of
/// `world_size` ranks, `local_world_size` of them per host (default: all on one host;
/// nullopt world: skip the checks that need it). Throws ConfigError whose message starts with
/// "file:line:col: ".
void check_scenario_file(const std::string& path, std::optional<int> world_size,
                         std::optional<int> local_world_size = std::nullopt);

/// ConfigError when a results file cannot be created at `path` (missing or read-only folder,
/// a folder in its place). Leaves nothing behind.
void check_results_path(const std::string& path);

/// The world_size the scenario declares, if any (so the launcher can default --nproc-per-node).
/// Throws ConfigError like check_scenario_file when the file cannot be read or parsed.
std::optional<int> scenario_world_size(const std::string& path);

/// Validates `path` for `world_size` ranks (nullopt: the file's world_size, else 4) and writes
/// --explain's per-step pictures of who sends what to whom to `out` (ANSI colours when
/// `colour`).
void explain_scenario_file(const std::string& path, std::optional<int> world_size, std::ostream& out, bool colour);

struct ScenarioRunOptions {
  std::string results_path;                // --results FILE (JSON Lines), empty: none
  std::optional<std::string> backend;      // --backend overrides the scenario's
  std::optional<std::string> device;       // --device (cpu or cuda) overrides the scenario's
  std::optional<double> timeout_seconds;   // --timeout overrides the scenario's
};

/// Runs the scenario as this process's rank (world from the environment, see env/world.hpp).
/// Returns 0 when every check passed, 1 when a rank found wrong values; throws on errors.
int run_scenario_file(const std::string& path, const ScenarioRunOptions& options);

}  // namespace distrun
