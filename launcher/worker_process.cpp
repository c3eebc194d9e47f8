#include "worker_process.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "distrun/core/error.hpp"
#include "signal_watch.hpp"

namespace distrun::launcher {

SpawnedWorker spawn_worker(const WorkerSpec& spec, const sigset_t& child_mask) {
  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
  std::vector<char*> argv, envp;
  for (auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : spec.envp) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : spec.cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpus);

  // stdin: a pipe from the launcher, or /dev/null; opened before fork like everything else.
  int in[2] = {-1, -1};
  if (spec.stdin_pipe) {
    if (pipe2(in, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + strerror(errno));
  } else {
    in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in[0] < 0) throw Error(std::string("cannot open /dev/null: ") + strerror(errno));
  }
  auto close_in = [&] {
    for (int fd : in)
      if (fd >= 0) close(fd);
  };
  int out[2], err[2], status[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    close_in();
    throw Error(std::string("pipe: ") + strerror(errno));
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    close_in();
    close(out[0]), close(out[1]);
    throw Error(std::string("pipe: ") + strerror(errno));
  }
  if (pipe2(status, O_CLOEXEC) != 0) {
    close_in();
    close(out[0]), close(out[1]), close(err[0]), close(err[1]);
    throw Error(std::string("pipe: ") + strerror(errno));
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1], status[0], status[1]}) close(fd);
    close_in();
    throw Error(std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    // Dies with the launcher, even on SIGKILL; the getppid check closes the race with a
    // launcher that died before prctl ran.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    restore_child_signals(child_mask);
    if (!spec.cpus.empty()) sched_setaffinity(0, sizeof cpus, &cpus);
    execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    ssize_t ignored = write(status[1], &e, sizeof e);
    (void)ignored;
    _exit(127);
  }
  // Also set from the parent, so kill(-pid) works even before the child ran setpgid.
  setpgid(pid, pid);
  close(out[1]);
  close(err[1]);
  close(status[1]);
  close(in[0]);
  int exec_errno = 0;
  ssize_t n;
  do n = read(status[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  close(status[0]);
  if (n == ssize_t(sizeof exec_errno)) {
    if (in[1] >= 0) close(in[1]);
    close(out[0]);
    close(err[0]);
    int ignored;
    waitpid(pid, &ignored, 0);  // it has already _exit'ed: no wait without bound
    throw ConfigError("cannot run '" + spec.argv[0] + "': " + strerror(exec_errno));
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  if (in[1] >= 0) fcntl(in[1], F_SETFL, O_NONBLOCK);
  return {pid, out[0], err[0], in[1]};
}

}  // namespace distrun::launcher
