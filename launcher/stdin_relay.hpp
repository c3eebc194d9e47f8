// distrun's standard input, passed on to one worker's stdin pipe (the other workers read
// /dev/null). Workers run in process groups of their own, so a worker reading the terminal
// itself would be stopped by SIGTTIN; distrun reads the terminal instead, and only while it is
// in the terminal's foreground (a background distrun neither steals input nor gets stopped).
#pragma once
#include <string>

namespace distrun::launcher {

class StdinRelay {
 public:
  StdinRelay() = default;
  /// Relays STDIN_FILENO into `worker_fd` (the write end of a worker's stdin pipe, owned from
  /// now on); -1: nothing to relay.
  explicit StdinRelay(int worker_fd);
  ~StdinRelay();
  StdinRelay(const StdinRelay&) = delete;
  StdinRelay& operator=(const StdinRelay&) = delete;
  StdinRelay(StdinRelay&& other) noexcept;
  StdinRelay& operator=(StdinRelay&& other) noexcept;

  /// The fd to poll for POLLIN (distrun's stdin) now, or -1.
  int read_fd() const;
  /// The fd to poll for POLLOUT (the worker's pipe) now, or -1.
  int write_fd() const;
  void on_readable();
  void on_writable();

 private:
  void finish();  // EOF or a closed worker pipe: close the worker's end, read no more

  int worker_fd_ = -1;
  bool stdin_done_ = false;
  std::string pending_;  // read from stdin, not yet taken by the worker
};

}  // namespace distrun::launcher
