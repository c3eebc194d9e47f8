// The scenario layer's entry points, used by distrun-worker and by the launcher (which
// validates a scenario before any worker starts). Each takes a scenario loaded once by
// scenario::load_scenario(): a process parses its file one time.
#pragma once
#include <optional>
#include <ostream>
#include <string>

namespace distrun {

namespace scenario {
struct Scenario;

/// Loads and checks the scenario file at `path` with every op distrun runs (loader.hpp).
Scenario load_scenario(const std::string& path);
/// The same from `text`, naming it `file` in errors.
Scenario load_scenario_text(const std::string& file, std::string text);
}  // namespace scenario

/// The backend `sc` runs on: `backend` (--backend) or the scenario's, where auto is nccl on
/// the device cuda (`device`, --device, or the scenario's) and gloo otherwise.
std::string scenario_backend(const scenario::Scenario& sc, const std::optional<std::string>& backend,
                             const std::optional<std::string>& device);

/// Validates everything that can be checked before running, for a world of `world_size`
/// ranks, `local_world_size` of them per host (default: all on one host; nullopt world:
/// only what loading checked), on `backend` when known (scenario_backend: "nccl" also refuses
/// what NCCL cannot do, without a GPU). Throws ConfigError whose message starts with
/// "file:line:col: ".
void check_scenario(const scenario::Scenario& sc, std::optional<int> world_size,
                    std::optional<int> local_world_size = std::nullopt, const std::string& backend = "");

/// ConfigError when a results file cannot be created at `path`: it must be a regular file or
/// a new name in an existing writable folder, and not the scenario `sc` was read from (a
/// directory, FIFO, device or link in its place is refused). Leaves nothing behind.
void check_results_path(const std::string& path, const scenario::Scenario& sc);

/// Validates `sc` for `world_size` ranks (nullopt: the file's world_size, else 4) and writes
/// --explain's per-step pictures of who sends what to whom to `out` (ANSI colours when
/// `colour`), with every rank's values before and after each step when `values`.
void explain_scenario(const scenario::Scenario& sc, std::optional<int> world_size, std::ostream& out, bool colour,
                      bool values = false);

struct ScenarioRunOptions {
  std::string results_path;               // --results FILE (JSON Lines), empty: none
  std::optional<std::string> backend;     // --backend overrides the scenario's
  std::optional<std::string> device;      // --device (cpu or cuda) overrides the scenario's
  std::optional<double> timeout_seconds;  // --timeout overrides the scenario's
};

/// Runs the scenario as this process's rank (world from the environment, see env/world.hpp).
/// Returns 0 when every check passed, 1 when a rank found wrong values; throws on errors.
int run_scenario_rank(const scenario::Scenario& sc, const ScenarioRunOptions& options);

}  // namespace distrun
