// distrun: the launcher. Parses the command line, runs the agent, maps errors to exit codes.
#include <cstring>
#include <iostream>

#include "agent.hpp"
#include "distrun/core/error.hpp"
#include "failure_report.hpp"
#include "options.hpp"
#include "signal_watch.hpp"
#include "worker_shim.hpp"

int main(int argc, char** argv) {
  // The reaper shim between distrun and each worker, where distrun-shim is not found.
  if (argc > 1 && std::strcmp(argv[1], distrun::launcher::kShimFlag) == 0)
    return distrun::launcher::run_reaper_shim(argc, argv);
  try {
    auto parsed = distrun::launcher::parse_launch_options(argc, argv);
    if (parsed.exit_now) return *parsed.exit_now;
    return distrun::launcher::run_agent(parsed.options);
  } catch (const distrun::launcher::Interrupted& e) {
    std::cerr << "distrun: " << e.what() << std::endl;
    distrun::launcher::write_agent_error_file(std::string("distrun: ") + e.what(), "", std::nullopt,
                                              distrun::launcher::kStoppedBySignalExit);
    return distrun::launcher::kStoppedBySignalExit;
  } catch (const std::exception& e) {
    std::cerr << "distrun: error: " << e.what() << std::endl;
    // torchrun's main is @record'ed: its own TORCHELASTIC_ERROR_FILE gets the error too.
    distrun::launcher::write_agent_error_file(std::string("distrun: ") + e.what(), "", std::nullopt,
                                              distrun::exit_code(e));
    return distrun::exit_code(e);
  }
}
