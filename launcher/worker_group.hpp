// The workers of one node for one attempt: started together, watched together, stopped
// together. The first failure stops the rest (SIGTERM to each process group, SIGKILL after a
// grace period); every child is reaped before run() returns or the group is destroyed.
#pragma once
#include <chrono>
#include <csignal>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "output_router.hpp"
#include "signal_watch.hpp"
#include "stdin_relay.hpp"
#include "worker_process.hpp"

namespace distrun::launcher {

/// The first worker that failed, as the summary tells it.
struct WorkerFailure {
  int rank = 0;
  int local_rank = 0;
  int wait_status = 0;  // from waitpid
  std::chrono::system_clock::time_point when;
  std::vector<std::string> stderr_tail;  // last lines of its stderr, newest last
  std::string error_file;                // where torch's @record may have written error.json
  std::string program;                   // the script or program, as the summary names it
  std::string interpreter;               // the python that ran it and why ("" if none)
  pid_t pid = -1;                        // the program's own pid, as torchrun's summary shows it
};

/// How each worker ended, for the summary after a signal stopped the group.
struct WorkerEnd {
  int rank = 0;
  int wait_status = 0;
};

enum class GroupOutcome {
  succeeded,    // every worker exited 0
  failed,       // a worker failed; see failure
  interrupted,  // the launcher got SIGINT/SIGTERM/SIGHUP; see signal
  peer_failed,  // another node reported a failure
};

struct GroupResult {
  GroupOutcome outcome = GroupOutcome::succeeded;
  std::optional<WorkerFailure> failure;
  int signal = 0;
  std::vector<WorkerEnd> ends;  // every worker, in rank order
};

class WorkerGroup {
 public:
  static constexpr size_t kTailLines = 20;
  /// The wait status a frozen worker's failure carries: stopped by SIGSTOP.
  static constexpr int kStoppedStatus = (SIGSTOP << 8) | 0x7f;

  /// Starts every worker of `specs`, in order. If one cannot start, those started are stopped
  /// and the error is rethrown.
  /// A worker stopped (SIGSTOP, frozen) for `stopped_limit` is a failure, named as stopped;
  /// and when another worker fails while one is stopped, the stopped one is named (the other
  /// only gave up on it). Zero: a stopped worker is left alone.
  WorkerGroup(const std::vector<WorkerSpec>& specs, OutputRouter& output, SignalWatch& signals,
              std::chrono::milliseconds stop_grace,
              std::chrono::milliseconds stopped_limit = std::chrono::milliseconds(0));
  /// Kills (SIGKILL) and reaps whatever still runs.
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  /// The worker the kernel shows stopped right now (the first seen so), as a failure; nullopt
  /// when none, or when stopped workers are left alone (no stopped limit). Asked when another
  /// node failed: a rank there may have given up waiting for this one.
  std::optional<WorkerFailure> stopped_now();

  /// Supervises until every worker has ended. `peer_failed`, when given, is polled every
  /// `poll_interval`; when it returns true the local workers are stopped. `on_first_failure`,
  /// when given, hears of a local failure or a signal the moment it is seen (so the other
  /// nodes can be told while the local workers are still being stopped).
  GroupResult run(const std::function<bool()>& peer_failed = {},
                  std::chrono::milliseconds poll_interval = std::chrono::milliseconds(200),
                  const std::function<void(const GroupResult&)>& on_first_failure = {});

 private:
  struct Stream {
    int fd = -1;
    std::string partial;  // bytes after the last newline (for the stderr tail only)
    // Bytes after the last '\n' or '\r', held back a moment so a line written in pieces
    // (Python's unbuffered print writes text and newline apart) is not cut by another rank's.
    std::string held;
    std::chrono::steady_clock::time_point held_since;
  };
  // Long enough for a process descheduled between its pieces on a loaded host (50 ms was
  // crossed at load 40-60), short enough that a prompt still shows at once to a person.
  static constexpr std::chrono::milliseconds kHoldPartial{200};
  struct Worker {
    WorkerSpec spec;
    pid_t pid = -1;  // the shim's: its process group holds the program and what it started
    pid_t program_pid = -1;
    bool running = false;
    int wait_status = 0;
    Stream out, err;  // with a terminal, out carries both streams and err is unused
    std::deque<std::string> err_tail;
    std::optional<std::chrono::steady_clock::time_point> stopped_since;  // seen frozen since
    // The summary's tail comes from stderr, or from the terminal that merged both streams.
    bool tail_from_err() const { return !spec.terminal; }
  };

  void read_stream(Worker& w, bool is_err);
  void add_tail_line(Worker& w, std::string_view line);
  void pass_on(Worker& w, bool is_err, std::string_view bytes);
  void flush_held(Worker& w, bool is_err);
  // Flushes what was held longer than kHoldPartial; returns the next time one is due.
  std::optional<std::chrono::steady_clock::time_point> flush_old_held();
  void close_stream(Worker& w, bool is_err);
  // One round of the loop: waits until `wake` for output, stdin or a signal and passes the
  // output on; 1 when a signal is waiting, 0 otherwise, -1 when poll failed.
  int poll_once(std::chrono::steady_clock::time_point wake);
  void handle_signals(GroupResult& result, const std::function<void(const GroupResult&)>& on_first_failure);
  // The stop's note and, after the grace, SIGKILL.
  void enforce_stop();
  WorkerFailure failure_of(Worker& w, int status);
  // Which workers the kernel shows stopped now, and since when (at most every kStoppedCheck,
  // unless `at_once`).
  void sample_stopped(bool at_once = false);
  Worker* frozen_first();
  // The failure of a worker stopped for stopped_limit_, if any.
  std::optional<WorkerFailure> frozen_too_long();
  // Reaps ended workers; returns the first failure among them (not counting those we stopped).
  void reap(GroupResult& result);
  void signal_all(int sig);
  // SIGWINCH: distrun's terminal size, passed on to every worker's terminal.
  void resize_terminals();
  // SIGTSTP (Ctrl-Z): stops every worker, then distrun itself; at SIGCONT resumes them.
  void suspend();
  void kill_and_reap_all();
  void begin_stop(int sig);
  bool any_running() const;
  bool any_stream_open() const;

  std::vector<Worker> workers_;
  StdinRelay stdin_;
  OutputRouter& output_;
  SignalWatch& signals_;
  std::chrono::milliseconds stop_grace_;
  bool stopping_ = false;
  bool killed_ = false;  // SIGKILL sent to every worker
  std::chrono::milliseconds stopped_limit_;
  static constexpr std::chrono::milliseconds kStoppedCheck{250};
  std::chrono::steady_clock::time_point last_stopped_check_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point kill_at_;
  // Workers still running this long after the stop began are announced, with the time left.
  static constexpr std::chrono::milliseconds kStopNoteAfter{1000};
  std::chrono::steady_clock::time_point note_at_;
};

}  // namespace distrun::launcher
