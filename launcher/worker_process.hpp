// One worker process: started through the reaper shim (worker_shim.hpp) in its own process
// group, tied to the launcher's life (PR_SET_PDEATHSIG), with stdout and stderr on pipes.
#pragma once
#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace distrun::launcher {

struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::string> envp;  // "KEY=VALUE"
  int listen_fd = -1;             // a listening socket handed to this worker as descriptor 3
};

struct SpawnedWorker {
  pid_t pid = -1;  // the shim's pid, also the process group id of shim and worker
  int out_fd = -1;
  int err_fd = -1;
};

/// Forks and execs `spec` under the shim. Throws ConfigError when the program cannot be
/// executed (not found, not executable): exec's errno comes back through a close-on-exec pipe.
SpawnedWorker spawn_worker(const WorkerSpec& spec, const sigset_t& child_mask);

}  // namespace distrun::launcher
