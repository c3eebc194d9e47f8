#include "worker_group.hpp"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <iostream>

#include "signal_names.hpp"

namespace distrun::launcher {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

WorkerGroup::WorkerGroup(const std::vector<WorkerSpec>& specs, OutputRouter& output, SignalWatch& signals,
                         milliseconds stop_grace, milliseconds stopped_limit)
    : output_(output), signals_(signals), stop_grace_(stop_grace), stopped_limit_(stopped_limit) {
  workers_.reserve(specs.size());
  for (const auto& spec : specs) {
    SpawnedWorker s;
    try {
      s = spawn_worker(spec, signals_.original_mask());
    } catch (...) {
      kill_and_reap_all();  // a throwing constructor gets no destructor: stop those started
      throw;
    }
    Worker w;
    w.spec = spec;
    w.pid = s.pid;
    w.program_pid = s.program_pid;
    w.running = true;
    w.out.fd = s.out_fd;
    w.err.fd = s.err_fd;
    if (s.in_fd >= 0) stdin_ = StdinRelay(s.in_fd);
    workers_.push_back(std::move(w));
  }
}

WorkerGroup::~WorkerGroup() { kill_and_reap_all(); }

void WorkerGroup::kill_and_reap_all() {
  for (auto& w : workers_) {
    if (w.running) {
      kill(-w.pid, SIGKILL);
      int status;
      // SIGKILL cannot be caught: the wait ends as soon as the kernel tears the process down.
      while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
      }
      w.running = false;
    }
    if (w.out.fd >= 0) close(w.out.fd);
    if (w.err.fd >= 0) close(w.err.fd);
    w.out.fd = w.err.fd = -1;
  }
}

void WorkerGroup::add_tail_line(Worker& w, std::string_view line) {
  w.err_tail.emplace_back(line);
  if (w.err_tail.size() > kTailLines) w.err_tail.pop_front();
}

void WorkerGroup::read_stream(Worker& w, bool is_err) {
  Stream& s = is_err ? w.err : w.out;
  char buf[65536];
  for (;;) {
    ssize_t n = read(s.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;  // drained for now
    // A pseudo-terminal's master reads EIO, not EOF, once the worker's side is closed.
    if (n <= 0) {
      close_stream(w, is_err);
      return;
    }
    pass_on(w, is_err, std::string_view(buf, size_t(n)));
    if (is_err != w.tail_from_err()) continue;
    s.partial.append(buf, size_t(n));
    size_t start = 0, nl;
    while ((nl = s.partial.find('\n', start)) != std::string::npos) {
      add_tail_line(w, std::string_view(s.partial).substr(start, nl - start));
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if (s.partial.size() > 1 << 16) {  // a very long line: keep its start, not all of it
      add_tail_line(w, s.partial);
      s.partial.clear();
    }
  }
}

// Whole lines (ended by '\n' or '\r': a progress bar's update counts) go out at once; the
// unended rest waits at most kHoldPartial (a prompt without newline still shows promptly).
void WorkerGroup::pass_on(Worker& w, bool is_err, std::string_view bytes) {
  Stream& s = is_err ? w.err : w.out;
  size_t end = bytes.find_last_of("\n\r");
  if (end == std::string_view::npos) {
    if (s.held.empty()) s.held_since = Clock::now();
    s.held.append(bytes);
    if (s.held.size() > 1 << 16) flush_held(w, is_err);
    return;
  }
  s.held.append(bytes.substr(0, end + 1));
  flush_held(w, is_err);
  if (end + 1 < bytes.size()) {
    s.held.assign(bytes.substr(end + 1));
    s.held_since = Clock::now();
  }
}

void WorkerGroup::flush_held(Worker& w, bool is_err) {
  Stream& s = is_err ? w.err : w.out;
  if (s.held.empty()) return;
  output_.write(w.spec.local_rank, is_err, s.held);
  s.held.clear();
}

std::optional<Clock::time_point> WorkerGroup::flush_old_held() {
  std::optional<Clock::time_point> next;
  auto now = Clock::now();
  for (auto& w : workers_)
    for (bool is_err : {false, true}) {
      Stream& s = is_err ? w.err : w.out;
      if (s.held.empty()) continue;
      if (now - s.held_since >= kHoldPartial)
        flush_held(w, is_err);
      else if (!next || s.held_since + kHoldPartial < *next)
        next = s.held_since + kHoldPartial;
    }
  return next;
}

void WorkerGroup::close_stream(Worker& w, bool is_err) {
  Stream& s = is_err ? w.err : w.out;
  flush_held(w, is_err);
  if (!s.partial.empty()) {
    add_tail_line(w, s.partial);
    s.partial.clear();
  }
  close(s.fd);
  s.fd = -1;
}

WorkerFailure WorkerGroup::failure_of(Worker& w, int status) {
  // Drain what it wrote, so the summary has its last words.
  Stream& tail = w.tail_from_err() ? w.err : w.out;
  if (tail.fd >= 0) read_stream(w, w.tail_from_err());
  WorkerFailure f;
  f.rank = w.spec.rank;
  f.local_rank = w.spec.local_rank;
  f.wait_status = status;
  f.when = std::chrono::system_clock::now();
  f.stderr_tail.assign(w.err_tail.begin(), w.err_tail.end());
  if (!tail.partial.empty()) f.stderr_tail.push_back(tail.partial);  // its last words, unended
  f.error_file = w.spec.error_file;
  f.program = w.spec.shown_name;
  f.interpreter = w.spec.interpreter;
  f.pid = w.program_pid;
  return f;
}

// The kernel's state of a process: 'T' (stopped) or 't' (stopped by a tracer) when frozen.
static bool is_stopped(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  FILE* f = std::fopen(path, "re");
  if (!f) return false;
  char buf[512] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  // "PID (COMM) STATE ...": COMM may hold ") ", so the state follows the last one.
  const char* close = nullptr;
  for (const char* p = buf; p + 2 < buf + n; ++p)
    if (p[0] == ')' && p[1] == ' ') close = p;
  // 'T' only: a job-control stop that nobody will end. 't' is a tracer's stop (a debugger, or a
  // sanitizer build's leak check holding the exiting worker), which its tracer ends.
  return close && close[2] == 'T';
}

void WorkerGroup::sample_stopped(bool at_once) {
  const auto now = Clock::now();
  if (!at_once && now - last_stopped_check_ < kStoppedCheck) return;
  // A gap longer than the check's pace means distrun itself did not run (stopped with its
  // workers by job control, or a stalled host): what it saw before says nothing now.
  const bool gap = now - last_stopped_check_ > kStoppedCheck * 10;
  last_stopped_check_ = now;
  for (auto& w : workers_) {
    if (!w.running || !is_stopped(w.program_pid)) {
      w.stopped_since.reset();
    } else if (!w.stopped_since || gap) {
      w.stopped_since = now;
    }
  }
}

// The worker frozen first, while another ended: the one the others waited for.
WorkerGroup::Worker* WorkerGroup::frozen_first() {
  Worker* first = nullptr;
  for (auto& w : workers_)
    if (w.running && w.stopped_since && (!first || *w.stopped_since < *first->stopped_since)) first = &w;
  return first;
}

std::optional<WorkerFailure> WorkerGroup::frozen_too_long() {
  if (stopped_limit_.count() <= 0) return std::nullopt;
  sample_stopped();
  Worker* w = frozen_first();
  if (!w || Clock::now() - *w->stopped_since < stopped_limit_) return std::nullopt;
  return failure_of(*w, kStoppedStatus);
}

std::optional<WorkerFailure> WorkerGroup::stopped_now() {
  if (stopped_limit_.count() <= 0) return std::nullopt;
  sample_stopped(true);
  Worker* w = frozen_first();
  if (!w) return std::nullopt;
  return failure_of(*w, kStoppedStatus);
}

void WorkerGroup::reap(GroupResult& result) {
  for (auto& w : workers_) {
    if (!w.running) continue;
    int status = 0;
    pid_t got = waitpid(w.pid, &status, WNOHANG);
    if (got != w.pid) continue;
    w.running = false;
    w.wait_status = status;
    // Whatever the worker left in its process group goes with it: no orphan survives.
    kill(-w.pid, SIGKILL);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok || stopping_ || result.failure) continue;
    // A peer that gives up on a frozen worker fails after it: the frozen one is named.
    if (Worker* frozen = stopped_limit_.count() > 0 ? frozen_first() : nullptr)
      result.failure = failure_of(*frozen, kStoppedStatus);
    else
      result.failure = failure_of(w, status);
  }
}

void WorkerGroup::resize_terminals() {
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) != 0) return;
  // The kernel tells each worker (its terminal's foreground) with SIGWINCH.
  for (auto& w : workers_)
    if (w.running && w.spec.terminal && w.out.fd >= 0) ioctl(w.out.fd, TIOCSWINSZ, &size);
}

void WorkerGroup::suspend() {
  // SIGSTOP, not SIGTSTP: a worker with a terminal of its own is in an orphaned process group,
  // where the kernel drops SIGTSTP; and none can ignore it.
  for (auto& w : workers_)
    if (w.running) kill(-w.pid, SIGSTOP);
  kill(getpid(), SIGSTOP);  // as the shell expects of its job; returns at SIGCONT (fg, bg)
  for (auto& w : workers_)
    if (w.running) kill(-w.pid, SIGCONT);
}

void WorkerGroup::signal_all(int sig) {
  for (auto& w : workers_)
    if (w.running) {
      kill(-w.pid, sig);
      if (sig != SIGKILL) kill(-w.pid, SIGCONT);  // a stopped worker must wake to see it
    }
}

void WorkerGroup::begin_stop(int sig) {
  if (stopping_) return;
  stopping_ = true;
  note_at_ = Clock::now() + kStopNoteAfter;
  kill_at_ = Clock::now() + stop_grace_;
  signal_all(sig);
  // A frozen worker takes its SIGTERM only once it runs again.
  for (auto& w : workers_)
    if (w.running && w.stopped_since) kill(-w.pid, SIGCONT);
}

bool WorkerGroup::any_running() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; });
}

bool WorkerGroup::any_stream_open() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.out.fd >= 0 || w.err.fd >= 0; });
}

int WorkerGroup::poll_once(Clock::time_point wake) {
  std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
  std::vector<std::pair<Worker*, bool>> owners{{nullptr, false}};
  for (auto& w : workers_) {
    if (w.out.fd >= 0) fds.push_back({w.out.fd, POLLIN, 0}), owners.emplace_back(&w, false);
    if (w.err.fd >= 0) fds.push_back({w.err.fd, POLLIN, 0}), owners.emplace_back(&w, true);
  }
  const size_t relay_at = fds.size();
  fds.push_back({stdin_.read_fd(), POLLIN, 0});  // a negative fd is skipped by poll
  fds.push_back({stdin_.write_fd(), POLLOUT, 0});
  if (auto held = flush_old_held()) wake = std::min(wake, *held);
  int timeout_ms = int(std::max<int64_t>(0, std::chrono::duration_cast<milliseconds>(wake - Clock::now()).count()));
  int n = poll(fds.data(), fds.size(), timeout_ms);
  if (n < 0) return errno == EINTR ? 0 : -1;
  for (size_t i = 1; n > 0 && i < relay_at; ++i)
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_stream(*owners[i].first, owners[i].second);
  if (n > 0 && fds[relay_at].fd >= 0 && fds[relay_at].revents) stdin_.on_readable();
  if (n > 0 && fds[relay_at + 1].fd >= 0 && fds[relay_at + 1].revents) stdin_.on_writable();
  return n > 0 && (fds[0].revents & POLLIN) ? 1 : 0;
}

void WorkerGroup::handle_signals(GroupResult& result, const std::function<void(const GroupResult&)>& on_first_failure) {
  while (int sig = signals_.next()) {
    if (sig == SIGCHLD) continue;  // reaped below, every round
    if (sig == SIGWINCH) {
      resize_terminals();
      continue;
    }
    // Job control reaches the whole job: Ctrl-Z stops every worker with distrun, and a
    // SIGCONT to distrun (fg, bg, kill -CONT) resumes them all.
    if (sig == SIGTSTP) {
      suspend();
      continue;
    }
    if (sig == SIGCONT) {
      for (auto& w : workers_)
        if (w.running) kill(-w.pid, SIGCONT);
      continue;
    }
    if (stopping_) {
      // Asked again while the workers have their grace (a second Ctrl-C): no more waiting.
      // The job's outcome stays what began the stop.
      if (!killed_ && any_running()) {
        std::cerr << "distrun: " << signal_abbrev(sig) << " while stopping: SIGKILL to every worker now" << std::endl;
        signal_all(SIGKILL);
        killed_ = true;
      }
      continue;
    }
    result.signal = sig;
    result.outcome = GroupOutcome::interrupted;
    begin_stop(sig);  // forward the signal itself, as torchrun does
    if (on_first_failure) on_first_failure(result);
  }
}

void WorkerGroup::enforce_stop() {
  const auto now = Clock::now();
  if (!stopping_ || killed_ || !any_running()) return;
  if (now >= note_at_ && note_at_ < kill_at_) {
    // Said once, so a stop that takes the whole grace (a checkpoint being saved) is not a mystery.
    const auto left = std::chrono::duration_cast<milliseconds>(kill_at_ - now).count();
    std::cerr << "distrun: waiting for "
              << std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; })
              << " worker(s) to stop after SIGTERM; SIGKILL in " << (left + 999) / 1000 << " s (--stop-grace)"
              << std::endl;
    note_at_ = kill_at_;
  }
  if (now >= kill_at_) {
    signal_all(SIGKILL);
    killed_ = true;
  }
}

GroupResult WorkerGroup::run(const std::function<bool()>& peer_failed, milliseconds poll_interval,
                             const std::function<void(const GroupResult&)>& on_first_failure) {
  GroupResult result;
  auto next_poll = Clock::now() + poll_interval;
  std::optional<Clock::time_point> drain_until;  // set once every worker has ended
  while (any_running() || (any_stream_open() && drain_until && Clock::now() < *drain_until)) {
    auto wake = drain_until ? *drain_until : next_poll;
    if (stopping_ && !killed_) wake = std::min(wake, std::min(kill_at_, note_at_));
    if (!drain_until && !peer_failed && !stopping_) wake = Clock::now() + milliseconds(1000);
    if (stopped_limit_.count() > 0 && !stopping_) wake = std::min(wake, Clock::now() + kStoppedCheck);
    const int events = poll_once(wake);
    if (events < 0) break;
    if (events > 0) handle_signals(result, on_first_failure);
    bool had_failure = result.failure.has_value();
    reap(result);
    if (!stopping_ && !result.failure) result.failure = frozen_too_long();
    if (result.failure && !had_failure && result.outcome == GroupOutcome::succeeded) {
      result.outcome = GroupOutcome::failed;
      begin_stop(SIGTERM);
      if (on_first_failure) on_first_failure(result);
    }
    enforce_stop();
    const auto now = Clock::now();
    if (peer_failed && !stopping_ && now >= next_poll) {
      next_poll = now + poll_interval;
      if (peer_failed()) {
        result.outcome = GroupOutcome::peer_failed;
        begin_stop(SIGTERM);
      }
    }
    // Pipes may be held open by something the worker left behind; wait a little, not forever.
    if (!any_running() && !drain_until) drain_until = Clock::now() + milliseconds(500);
  }
  for (auto& w : workers_) {
    if (w.out.fd >= 0) close_stream(w, false);
    if (w.err.fd >= 0) close_stream(w, true);
    result.ends.push_back({w.spec.rank, w.wait_status});
  }
  return result;
}

}  // namespace distrun::launcher
