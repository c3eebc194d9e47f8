// One worker process: started through the reaper shim (worker_shim.hpp) in its own process
// group, tied to the launcher's life (PR_SET_PDEATHSIG), with stdout and stderr on pipes (or
// one pseudo-terminal, in a session of its own, when distrun's own output is a terminal), and
// stdin either a pipe the launcher fills (the rank chosen to read the console) or /dev/null
// (EOF at once, never SIGTTIN). Shim and worker share stdin, the pipes and the CPU binding.
#pragma once
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace distrun::launcher {

struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::string> envp;  // "KEY=VALUE"
  int listen_fd = -1;             // a listening socket handed to this worker as descriptor 3
  bool stdin_pipe = false;        // stdin from the launcher (SpawnedWorker::in_fd), else /dev/null
  std::vector<int> cpus;          // CPUs to bind to (--numa-binding); empty: no binding
  // Given: stdout and stderr are one pseudo-terminal of this size (SpawnedWorker::out_fd is its
  // master), the controlling terminal of a session of the worker's own, so the program sees a
  // terminal as it would alone and its two streams keep their order. Else: two pipes.
  std::optional<winsize> terminal;
  std::string shown_name;   // what the summary calls the program (the script, not python)
  std::string interpreter;  // the python running it and why, for the summary ("" if none)
  std::string error_file;   // its TORCHELASTIC_ERROR_FILE (torch's @record error.json)
};

struct SpawnedWorker {
  pid_t pid = -1;          // the shim's pid, also the process group id of shim and worker
  pid_t program_pid = -1;  // the program's own pid under the shim (what it calls getpid()), if known
  int out_fd = -1;
  int err_fd = -1;  // -1 with a terminal: both streams come through out_fd
  int in_fd = -1;   // write end of the worker's stdin pipe (non-blocking), when stdin_pipe
};

/// Forks and execs `spec` under the shim. Throws ConfigError when the program cannot be
/// executed (not found, not executable): exec's errno comes back through a close-on-exec pipe.
SpawnedWorker spawn_worker(const WorkerSpec& spec, const sigset_t& child_mask);

}  // namespace distrun::launcher
