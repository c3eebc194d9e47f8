// Signals the launcher handles in its poll loop: SIGCHLD (a worker ended), those of
// --signals-to-handle (torchrun's default SIGTERM,SIGINT,SIGHUP,SIGQUIT: forwarded to the
// workers, which are then stopped, with the summary), and SIGTSTP, SIGCONT and SIGWINCH, which
// reach every worker (job control, the terminal's size). They are blocked and read from a signalfd, so no handler
// runs at an awkward moment; workers get the original mask back before exec.
#pragma once
#include <signal.h>

#include <exception>
#include <string>
#include <vector>

namespace distrun::launcher {

/// distrun's exit status after a signal of --signals-to-handle stopped it, on every path (while
/// the nodes meet, or with workers running): 1, as torchrun, whose SignalException leaves its
/// @record'ed main as an uncaught exception. Scripts written for torchrun test `$?` against
/// that; the summary names the signal.
inline constexpr int kStoppedBySignalExit = 1;

/// The agent was stopped by SIGINT/SIGTERM/SIGHUP outside the workers' run (while the nodes
/// meet or wait for each other); main exits kStoppedBySignalExit.
class Interrupted : public std::exception {
 public:
  explicit Interrupted(int signal) : signal_(signal), text_("stopped by signal " + std::to_string(signal)) {}
  int signal() const { return signal_; }
  const char* what() const noexcept override { return text_.c_str(); }

 private:
  int signal_;
  std::string text_;
};

class SignalWatch {
 public:
  /// Blocks the watched signals in this thread (call before starting any thread) and opens
  /// the signalfd. SIGPIPE is ignored so a closed console never kills the launcher; SIGTTIN so
  /// a launcher moved to the background gets EIO from the terminal instead of stopping.
  explicit SignalWatch(const std::vector<int>& handled = {SIGINT, SIGTERM, SIGHUP, SIGQUIT});
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  /// The descriptor to poll for POLLIN.
  int fd() const { return fd_; }
  /// Reads one pending signal number, or 0 when none is pending.
  int next();
  /// The first pending SIGINT/SIGTERM/SIGHUP (SIGCHLD, SIGCONT, SIGWINCH skipped; SIGTSTP stops
  /// distrun), or 0; for waits without workers.
  int next_stop();
  /// The mask and dispositions the launcher started with, for children to restore.
  const sigset_t& original_mask() const { return original_mask_; }

 private:
  int fd_ = -1;
  sigset_t original_mask_;
  struct sigaction original_pipe_, original_ttin_, original_xfsz_;
};

/// Restores default dispositions and the original mask; call in a forked child before exec.
void restore_child_signals(const sigset_t& mask);

}  // namespace distrun::launcher
