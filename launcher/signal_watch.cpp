#include "signal_watch.hpp"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "distrun/core/error.hpp"

namespace distrun::launcher {

SignalWatch::SignalWatch(const std::vector<int>& handled) {
  sigset_t watched;
  sigemptyset(&watched);
  sigaddset(&watched, SIGCHLD);
  for (int s : handled) sigaddset(&watched, s);
  // Job control and the terminal's size, passed on to the workers. SIGTSTP only where it would
  // stop distrun: a shell without job control starts its jobs with it ignored.
  sigaddset(&watched, SIGCONT);
  sigaddset(&watched, SIGWINCH);
  struct sigaction tstp {};
  if (sigaction(SIGTSTP, nullptr, &tstp) == 0 && tstp.sa_handler != SIG_IGN) sigaddset(&watched, SIGTSTP);
  if (pthread_sigmask(SIG_BLOCK, &watched, &original_mask_) != 0) throw Error("cannot block signals");
  fd_ = signalfd(-1, &watched, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) throw Error(std::string("signalfd: ") + strerror(errno));
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &original_pipe_);
  sigaction(SIGTTIN, &ignore, &original_ttin_);
  sigaction(SIGXFSZ, &ignore, &original_xfsz_);  // a log over the file size limit: EFBIG, reported
}

SignalWatch::~SignalWatch() {
  close(fd_);
  sigaction(SIGPIPE, &original_pipe_, nullptr);
  sigaction(SIGTTIN, &original_ttin_, nullptr);
  sigaction(SIGXFSZ, &original_xfsz_, nullptr);
  pthread_sigmask(SIG_SETMASK, &original_mask_, nullptr);
}

int SignalWatch::next() {
  signalfd_siginfo info;
  ssize_t n = read(fd_, &info, sizeof info);
  return n == ssize_t(sizeof info) ? int(info.ssi_signo) : 0;
}

int SignalWatch::next_stop() {
  while (int sig = next()) {
    if (sig == SIGTSTP)
      kill(getpid(), SIGSTOP);  // no worker to stop yet: distrun alone
    else if (sig != SIGCHLD && sig != SIGCONT && sig != SIGWINCH)
      return sig;
  }
  return 0;
}

void restore_child_signals(const sigset_t& mask) {
  // Dispositions set to SIG_IGN survive exec; reset the one the launcher changed.
  signal(SIGPIPE, SIG_DFL);
  signal(SIGTTIN, SIG_DFL);
  signal(SIGXFSZ, SIG_DFL);
  sigprocmask(SIG_SETMASK, &mask, nullptr);
}

}  // namespace distrun::launcher
