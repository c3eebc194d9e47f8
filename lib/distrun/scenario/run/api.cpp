// The scenario layer's entry points (api.hpp): load, validate against the world, join the
// job and run.
#include "distrun/scenario/run/api.hpp"

#include <cmath>

#include "distrun/comm/process_group.hpp"
#include "distrun/nccl/device_choice.hpp"
#include "distrun/scenario/check/reference.hpp"
#include "distrun/scenario/check/validation.hpp"
#include "distrun/scenario/load/loader.hpp"
#include "distrun/scenario/model/limits.hpp"
#include "distrun/scenario/output/explain.hpp"
#include "distrun/scenario/ops/ops.hpp"
#include "distrun/scenario/output/results_file.hpp"
#include "distrun/scenario/run/runner.hpp"

namespace distrun {

namespace scenario {

Scenario load_scenario(const std::string& path) { return load_scenario(path, op_table()); }

Scenario load_scenario_text(const std::string& file, std::string text) {
  return load_scenario_text(file, std::move(text), op_table());
}

}  // namespace scenario

std::string scenario_backend(const scenario::Scenario& sc, const std::optional<std::string>& backend,
                             const std::optional<std::string>& device) {
  const std::string chosen = backend.value_or(sc.backend);
  if (chosen != "auto") return chosen;
  return device.value_or(sc.device) == "cuda" ? "nccl" : "gloo";
}

void check_scenario(const scenario::Scenario& sc, std::optional<int> world_size, std::optional<int> local_world_size,
                    const std::string& backend) {
  // Shapes, groups, dtypes and sizes only: no rank's values, so the cost does not grow with
  // the tensors (the workers compute the values of their own results).
  if (world_size)
    scenario::Validation(sc, *world_size, local_world_size.value_or(*world_size), std::nullopt, backend == "nccl");
}

void check_results_path(const std::string& path, const scenario::Scenario& sc) {
  scenario::ResultsFile probe(path, sc.file);  // an unnamed (or temporary) file, gone when probe is
}

void explain_scenario(const scenario::Scenario& sc, std::optional<int> world_size, std::ostream& out, bool colour,
                      bool values) {
  const int world = world_size.value_or(sc.world_size.value_or(4));
  // The same checks as a run (they throw): a picture of a valid scenario only.
  [[maybe_unused]] const scenario::Validation checked(sc, world, world);
  scenario::explain(sc, world, out, colour, values);
}

int run_scenario_rank(const scenario::Scenario& sc, const ScenarioRunOptions& options) {
  const WorldInfo world = world_from_env();
  // The whole scenario is validated for this world before joining it, so a scenario that
  // cannot run fails on every rank at once, before any collective; then this rank computes
  // the expected values of its own results (and only what they depend on).
  scenario::Reference reference(sc, world.world_size, world.local_world_size, world.rank);

  const std::string device = options.device.value_or(sc.device);
  if (device != "cpu" && device != "cuda")
    throw ConfigError("--device: unknown device '" + device + "'; known: cpu, cuda");
  const std::string backend = scenario_backend(sc, options.backend, device);
  InitOptions init;
  init.backend = parse_backend(backend);
  init.world = world;
  const double timeout = options.timeout_seconds.value_or(sc.timeout_seconds);
  if (auto why = scenario::bad_timeout(timeout)) throw ConfigError("timeout " + *why);
  init.timeout = std::chrono::milliseconds(int64_t(std::ceil(timeout * 1000)));
  scenario::RunSettings settings;
  settings.results_path = options.results_path;
  // Rank 0 opens the results file before joining, so an unwritable path fails fast (exit 2).
  if (world.rank == 0 && !options.results_path.empty())
    settings.results_file = std::make_shared<scenario::ResultsFile>(options.results_path, sc.file);
  auto pg = ProcessGroup::init(init);

  settings.local_rank = world.local_rank;
  settings.local_world_size = world.local_world_size;
  // NCCL chose the device and its tensors must be there; Gloo stages CUDA tensors through the
  // host from the device the same rule picks (nccl/device_choice.hpp).
  const Device backend_device = pg->backend().tensor_device();
  settings.device = device != "cuda" ? Device::cpu()
                    : backend_device.is_cuda()
                        ? backend_device
                        : Device::cuda(nccl::cuda_device_for_local_rank(world.local_rank, world.local_world_size,
                                                                        /*exclusive=*/false));
  settings.backend_name = backend;
  return scenario::run_scenario(sc, reference, pg->backend_ptr(), settings);
}

}  // namespace distrun
