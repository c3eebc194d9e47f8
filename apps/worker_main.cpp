// distrun-worker: runs one rank of a scenario. The world comes from the environment
// (torchrun/distrun, SLURM or MPI variables; a world of one when none is set).
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <iostream>

#include "distrun/core/error.hpp"
#include "distrun/env/world.hpp"
#include "distrun/scenario/run/api.hpp"
#include "distrun/scenario/load/loader.hpp"

int main(int argc, char** argv) {
  // A rank writing to a peer that just died must get EPIPE (an error naming the lost peer),
  // not a silent death by SIGPIPE that hides which rank failed first. Python, hence
  // torchrun's workers, ignores SIGPIPE the same way.
  std::signal(SIGPIPE, SIG_IGN);
  // Log lines (e.g. the store refusing a stranger) go to stderr: rank 0's stdout carries the
  // scenario's ordered results, which the launcher passes on unprefixed.
  spdlog::set_default_logger(spdlog::stderr_color_mt("distrun-worker"));
  CLI::App app{"Runs one rank of a distrun scenario", "distrun-worker"};
  std::string scenario_path, log_level = "warn";
  distrun::ScenarioRunOptions options;
  bool check_only = false, explain = false, values = false;
  app.add_option("scenario", scenario_path, "Scenario file (YAML)")->required();
  app.add_option("--results", options.results_path, "Write every result as JSON Lines to FILE (rank 0)");
  app.add_option("--backend", options.backend, "Override the scenario's backend")
      ->check(CLI::IsMember({"gloo", "nccl", "auto"}));
  app.add_option("--device", options.device, "Override the scenario's device (cpu or cuda)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--timeout", options.timeout_seconds, "Seconds per collective (overrides the scenario's)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off");
  app.add_flag("--check", check_only, "Validate the scenario for this world and exit");
  app.add_flag("--explain", explain, "Draw who sends what to whom in each step, and exit");
  app.add_flag("--values", values, "With --explain: every rank's values before and after each step")
      ->needs("--explain");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    const auto level = spdlog::level::from_str(log_level);
    if (level == spdlog::level::off && log_level != "off")
      throw distrun::ConfigError("--log-level: unknown level '" + log_level + "'");
    spdlog::set_level(level);
    const distrun::scenario::Scenario sc = distrun::scenario::load_scenario(scenario_path);
    if (explain) {
      // For the launched world when there is one, else the file's world_size (else 4).
      const auto world = distrun::world_from_env();
      const bool colour = ::isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR");
      distrun::explain_scenario(sc, world.source == "none" ? std::nullopt : std::optional<int>(world.world_size),
                                std::cout, colour, values);
      return 0;
    }
    if (check_only) {
      // Checked against the launched world when there is one (e.g. under srun), else alone.
      const auto world = distrun::world_from_env();
      distrun::check_scenario(sc, world.source == "none" ? std::nullopt : std::optional<int>(world.world_size),
                              std::nullopt, distrun::scenario_backend(sc, options.backend, options.device));
      return 0;
    }
    return distrun::run_scenario_rank(sc, options);
  } catch (const std::exception& e) {
    std::cerr << "distrun: error: " << e.what() << std::endl;
    return distrun::exit_code(e);
  }
}
