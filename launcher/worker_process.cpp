#include "worker_process.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "distrun/core/error.hpp"
#include "signal_watch.hpp"
#include "worker_shim.hpp"

namespace distrun::launcher {
namespace {

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("cannot read /proc/self/exe to start the reaper shim");
  return std::string(buf, size_t(n));
}

// The program to start as the shim: distrun-shim beside us (the build tree) or in
// ../libexec/distrun (installed), else distrun itself, which acts as the shim too (slower to
// start: it loads every library distrun links).
const std::string& shim_exe() {
  static const std::string exe = [] {
    const std::string self = self_exe();
    const std::string dir = self.substr(0, self.rfind('/'));
    for (const std::string& candidate : {dir + "/distrun-shim", dir + "/../libexec/distrun/distrun-shim"})
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    return self;
  }();
  return exe;
}

// The one child of the shim `shim`: the program, forked and exec'd before spawn_worker returns.
pid_t program_pid_of(pid_t shim) {
  const std::string path = "/proc/" + std::to_string(shim) + "/task/" + std::to_string(shim) + "/children";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[64] = {};
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  return n > 0 ? pid_t(std::atoi(buf)) : -1;
}

// A pseudo-terminal pair of `size`: fds[0] the master (distrun reads it), fds[1] the worker's
// end. Output processing is off: the worker's "\n" arrives as written, and distrun's own
// terminal turns it into "\r\n" once. Returns false with errno set.
bool open_terminal(const winsize& size, int fds[2]) {
  fds[0] = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  char name[128];
  if (fds[0] < 0 || grantpt(fds[0]) != 0 || unlockpt(fds[0]) != 0 || ptsname_r(fds[0], name, sizeof name) != 0)
    return false;
  fds[1] = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  termios mode{};
  if (fds[1] < 0 || tcgetattr(fds[1], &mode) != 0) return false;
  mode.c_oflag &= ~tcflag_t(OPOST);
  return tcsetattr(fds[1], TCSANOW, &mode) == 0 && ioctl(fds[0], TIOCSWINSZ, &size) == 0;
}

void close_all(std::initializer_list<int> fds) {
  for (int fd : fds)
    if (fd >= 0) close(fd);
}

// The descriptors a worker starts with, made before fork: its stdin, stdout and stderr (a
// pseudo-terminal for both, or pipes), the shim's exec status and the worker's argv.
struct ChildPipes {
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1}, args[2] = {-1, -1};
  void close_every() const {
    close_all({in[0], in[1], out[0], out[1], err[0], err[1], status[0], status[1], args[0], args[1]});
  }
};

ChildPipes open_pipes(const WorkerSpec& spec) {
  ChildPipes p;
  // stdin: a pipe from the launcher, or /dev/null; the shim passes it on to the worker unchanged.
  if (spec.stdin_pipe) {
    if (pipe2(p.in, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + strerror(errno));
  } else {
    p.in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (p.in[0] < 0) throw Error(std::string("cannot open /dev/null: ") + strerror(errno));
  }
  if ((spec.terminal ? !open_terminal(*spec.terminal, p.out)
                     : pipe2(p.out, O_CLOEXEC) != 0 || pipe2(p.err, O_CLOEXEC) != 0) ||
      pipe2(p.status, O_CLOEXEC) != 0 || pipe2(p.args, O_CLOEXEC) != 0) {
    int e = errno;
    p.close_every();
    throw Error(std::string(spec.terminal ? "pseudo-terminal or pipe: " : "pipe: ") + strerror(e));
  }
  return p;
}

// The child between fork and the shim's exec: async-signal-safe calls only.
[[noreturn]] void become_shim(const WorkerSpec& spec, const ChildPipes& p, pid_t parent, const cpu_set_t& cpus,
                              char* const* argv, char* const* envp, const sigset_t& child_mask) {
  const bool terminal = spec.terminal.has_value();
  // With a terminal: a session of its own, whose controlling terminal it is (so the worker is
  // its foreground and gets its SIGWINCH); a session leader is also its process group's.
  if (terminal)
    setsid();
  else
    setpgid(0, 0);
  // Dies with the launcher, even on SIGKILL (the shim turns this into its own clean-up);
  // the getppid check closes the race with a launcher that died before prctl ran.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  // The shim's descriptors at fixed numbers; first lifted above them so none is clobbered.
  int st = fcntl(p.status[1], F_DUPFD_CLOEXEC, 10);
  int av = fcntl(p.args[0], F_DUPFD_CLOEXEC, 10);
  int ls = spec.listen_fd >= 0 ? fcntl(spec.listen_fd, F_DUPFD_CLOEXEC, 10) : -1;
  dup2(p.in[0], STDIN_FILENO);
  dup2(p.out[1], STDOUT_FILENO);
  dup2(terminal ? p.out[1] : p.err[1], STDERR_FILENO);
  if (terminal) ioctl(STDOUT_FILENO, TIOCSCTTY, 0);
  dup2(st, kShimStatusFd);  // dup2 clears close-on-exec on the copy
  dup2(av, kShimArgvFd);
  if (ls >= 0) dup2(ls, kShimListenFd);
  // Only these reach the shim and the worker: what distrun itself inherited stays out (as
  // torchrun's subprocess closes them), and a stray descriptor 3 is no listening socket.
  if (ls < 0) close(kShimListenFd);
  if (close_range(kShimArgvFd + 1, ~0U, 0) != 0)
    for (int fd = kShimArgvFd + 1; fd < 4096; ++fd) close(fd);
  restore_child_signals(child_mask);
  // The binding is inherited by the worker the shim starts.
  if (!spec.cpus.empty()) sched_setaffinity(0, sizeof cpus, &cpus);
  execve(argv[0], argv, envp);
  int e = errno;
  ssize_t ignored = write(p.status[1], &e, sizeof e);
  (void)ignored;
  _exit(127);
}

// Hands the shim its worker's argv, then reads its exec status: 0 once the shim runs, else
// the errno of its failed exec.
int hand_over_argv(const ChildPipes& p, const std::string& packed) {
  for (size_t at = 0; at < packed.size();) {
    ssize_t n = write(p.args[1], packed.data() + at, packed.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the shim is gone: its status says why
    at += size_t(n);
  }
  close(p.args[1]);
  int exec_errno = 0;
  ssize_t n;
  do n = read(p.status[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  close(p.status[0]);
  return n == ssize_t(sizeof exec_errno) ? exec_errno : 0;
}

}  // namespace

SpawnedWorker spawn_worker(const WorkerSpec& spec, const sigset_t& child_mask) {
  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
  const std::string& exe = shim_exe();
  const std::string parent_pid = std::to_string(getpid());
  std::vector<char*> argv{const_cast<char*>(exe.c_str()), const_cast<char*>(kShimFlag),
                          const_cast<char*>(parent_pid.c_str()), nullptr};
  std::vector<char*> envp;
  for (auto& e : spec.envp) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::string packed;  // the worker's argv for the shim, NUL-separated
  for (auto& a : spec.argv) packed += a + '\0';
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : spec.cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpus);

  const ChildPipes p = open_pipes(spec);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    p.close_every();
    throw Error(std::string("fork: ") + strerror(e));
  }
  if (pid == 0) become_shim(spec, p, parent, cpus, argv.data(), envp.data(), child_mask);
  // Also set from the parent, so kill(-pid) works even before the child ran setpgid; not for a
  // session leader to be (setsid fails in a process group of its own). Either way the group
  // exists once the exec status below has come.
  if (!spec.terminal) setpgid(pid, pid);
  close_all({p.in[0], p.out[1], p.err[1], p.status[1], p.args[0]});
  if (int exec_errno = hand_over_argv(p, packed)) {
    close_all({p.in[1], p.out[0], p.err[0]});
    int ignored;
    waitpid(pid, &ignored, 0);  // it has already _exit'ed (or will at once): no wait without bound
    throw ConfigError("cannot run '" + spec.argv[0] + "': " + strerror(exec_errno));
  }
  fcntl(p.out[0], F_SETFL, O_NONBLOCK);
  if (p.err[0] >= 0) fcntl(p.err[0], F_SETFL, O_NONBLOCK);
  if (p.in[1] >= 0) fcntl(p.in[1], F_SETFL, O_NONBLOCK);
  return {pid, program_pid_of(pid), p.out[0], p.err[0], p.in[1]};
}

}  // namespace distrun::launcher
