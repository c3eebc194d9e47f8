#include "worker_shim.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace distrun::launcher {
namespace {

std::vector<std::string> read_argv() {
  std::string all;
  char buf[65536];
  for (;;) {
    ssize_t n = read(kShimArgvFd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    all.append(buf, size_t(n));
  }
  close(kShimArgvFd);
  std::vector<std::string> args;
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find('\0', at);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(at, end - at));
    at = end + 1;
  }
  return args;
}

// Our children right now, from /proc (each task's parent in /proc/PID/stat).
std::vector<pid_t> children() {
  std::vector<pid_t> out;
  const pid_t self = getpid();
  DIR* dir = opendir("/proc");
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string path = std::string("/proc/") + e->d_name + "/stat";
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = '\0';
    const char* close_paren = strrchr(buf, ')');  // the command name may hold spaces
    int ppid = 0;
    char state = 0;
    if (close_paren && sscanf(close_paren + 1, " %c %d", &state, &ppid) == 2 && ppid == self)
      out.push_back(pid_t(atoi(e->d_name)));
  }
  closedir(dir);
  return out;
}

// Kills every descendant: a killed process's children are reparented to us (subreaper), so
// the next round finds them, until waitpid says there is no child left.
void kill_descendants() {
  for (;;) {
    for (pid_t p : children()) kill(p, SIGKILL);
    int status;
    pid_t got = waitpid(-1, &status, 0);
    if (got < 0 && errno == ECHILD) return;
  }
}

[[noreturn]] void end_like(int status) {
  if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  // End by the same signal, so distrun reports what the worker died of (without a core of us).
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  sigprocmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
  _exit(128 + sig);
}

}  // namespace

int run_reaper_shim(int argc, char** argv) {
  if (argc < 3) return 127;
  const pid_t launcher = pid_t(atoi(argv[2]));
  std::vector<std::string> args = read_argv();
  if (args.empty()) return 127;
  // Asked before any descriptor of ours can take the number.
  const bool has_listen_fd = fcntl(kShimListenFd, F_GETFD) >= 0;

  // Every signal that can reach us is read from the signalfd: distrun sends the signals of
  // --signals-to-handle (SIGQUIT, SIGUSR2, ...) to the whole process group, shim included,
  // and none of them may end the shim before its worker. Faults stay unblocked.
  sigset_t watched, original;
  sigfillset(&watched);
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&watched, s);
  sigprocmask(SIG_BLOCK, &watched, &original);
  int sfd = signalfd(-1, &watched, SFD_CLOEXEC);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  // SIGUSR1 (caught here) instead of the SIGKILL the spawner set: we must outlive distrun
  // long enough to clean up. A launcher already gone is seen by the parent check.
  prctl(PR_SET_PDEATHSIG, SIGUSR1);
  if (getppid() != launcher) return 127;
  fcntl(kShimStatusFd, F_SETFD, FD_CLOEXEC);

  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t shim = getpid();
  pid_t worker = fork();
  if (worker < 0) return 127;
  if (worker == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != shim) _exit(127);
    close(sfd);
    sigprocmask(SIG_SETMASK, &original, nullptr);
    execvp(cargv[0], cargv.data());
    int e = errno;
    ssize_t ignored = write(kShimStatusFd, &e, sizeof e);
    (void)ignored;
    _exit(127);
  }
  close(kShimStatusFd);
  if (has_listen_fd) close(kShimListenFd);  // rank 0 has its copy

  for (;;) {
    signalfd_siginfo info;
    ssize_t n = read(sfd, &info, sizeof info);
    if (n != ssize_t(sizeof info)) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    // SIGUSR1 is also the parent-death signal; forwarded by distrun (which is alive) it is
    // the worker's business only: the parent check tells the two apart.
    if (info.ssi_signo == SIGUSR1 && getppid() != launcher) {
      // distrun is gone: nobody will stop the worker or its children but us.
      kill(worker, SIGKILL);
      kill_descendants();
      _exit(137);
    }
    if (info.ssi_signo != SIGCHLD) continue;  // distrun signals the worker's group directly
    int status = 0;
    for (pid_t got; (got = waitpid(-1, &status, WNOHANG)) > 0;) {
      if (got != worker) continue;  // an orphan reparented to us, ended: reaped
      kill_descendants();           // what the worker left behind goes with it
      end_like(status);
    }
  }
  kill(worker, SIGKILL);
  kill_descendants();
  return 127;
}

}  // namespace distrun::launcher
