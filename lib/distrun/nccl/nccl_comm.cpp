#include "distrun/nccl/nccl_comm.hpp"

#include <thread>

#include "distrun/core/error.hpp"
#include "distrun/nccl/nccl_check.hpp"

namespace distrun::nccl {

namespace {

// For poll_ready() only: NCCL says a nonblocking communicator is ready through
// ncclCommGetAsyncError alone, "in progress" while the thread NCCL started for the last group
// runs (set-up, connections, a launch). A short spin, then sleeps up to 200 us. Waits for
// operations to complete do not poll: see wait() and watchdog.hpp.
class Backoff {
 public:
  void pause() {
    if (++spins_ < 200) return std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    sleep_us_ = std::min(sleep_us_ * 2, 200);
  }

 private:
  int spins_ = 0;
  int sleep_us_ = 10;
};

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  // Whether a split shares this communicator's resources (buffers, proxy, connections) is read
  // from the parent's config, not the child's (init.cc, ncclCommInitChildComm): set here, the
  // blocking twin uses the connections made on its parent.
  config.splitShare = 1;
  return config;
}

[[noreturn]] void timed_out(const char* what, Clock::time_point started) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  throw TimeoutError(std::string(what) + ": timed out after " + std::to_string(ms) + " ms");
}

}  // namespace

std::string NcclComm::new_unique_id() {
  ncclUniqueId made;
  DISTRUN_NCCL_CHECK(ncclGetUniqueId(&made));
  return std::string(reinterpret_cast<const char*>(&made), sizeof(made));
}

std::unique_ptr<NcclComm> NcclComm::start(int size, int rank, const ncclUniqueId& id) {
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm) ncclCommAbort(comm);
    nccl_check(r, "ncclCommInitRankConfig");
  }
  return std::unique_ptr<NcclComm>(new NcclComm(comm));
}

std::unique_ptr<NcclComm> NcclComm::init(int size, int rank, const ncclUniqueId& id, Clock::time_point deadline) {
  std::unique_ptr<NcclComm> c = start(size, rank, id);
  c->ensure_ready("ncclCommInitRankConfig", deadline);
  return c;
}

void NcclComm::ensure_ready(const char* what, Clock::time_point deadline) {
  auto held = hold();
  require_alive(what);
  if (ready_) return;
  try {
    poll_ready(what, deadline);
  } catch (...) {
    abort();
    throw;
  }
  ready_ = true;
}

std::unique_ptr<NcclComm> NcclComm::split(int color, int key, Clock::time_point deadline) {
  return split_with(color, key, nonblocking_config(), deadline);
}

std::unique_ptr<NcclComm> NcclComm::blocking_twin(int rank, Clock::time_point deadline) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  config.splitShare = 1;  // for the twin's own splits: it shares its parent's by the parent's config
  std::unique_ptr<NcclComm> c = split_with(0, rank, config, deadline);
  c->blocking_ = true;
  return c;
}

std::unique_ptr<NcclComm> NcclComm::split_with(int color, int key, ncclConfig_t config, Clock::time_point deadline) {
  auto held = hold();
  require_alive("ncclCommSplit");
  // NCCL writes the child's handle from its own thread, possibly after this call has given up
  // (timeout) and until the parent is aborted: the slot belongs to this object, not the stack.
  split_slots_.push_back(std::make_unique<ncclComm_t>(nullptr));
  ncclComm_t* slot = split_slots_.back().get();
  ncclResult_t r = ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, slot, &config);
  // NCCL 2.28 returns ncclSuccess while the split still runs in its thread (the group's
  // ncclInProgress is dropped): the parent settles once every rank has taken part, and the
  // child's handle is written just before. On a throw the slot stays here: abort() aborts
  // whatever child NCCL put in it.
  settle(r, "ncclCommSplit", deadline);
  ncclComm_t child = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  split_slots_.pop_back();  // settled: NCCL's split job is over and wrote its last
  if (!child) {
    if (color < 0) return nullptr;
    throw BackendError("ncclCommSplit: NCCL settled without making the communicator");
  }
  std::unique_ptr<NcclComm> c(new NcclComm(child));
  c->ensure_ready("ncclCommSplit", deadline);
  return c;
}

NcclComm::~NcclComm() {
  watchdog_.reset();  // its thread looks at the handle: stopped before the handle goes
  auto held = hold();
  if (!comm_ || aborted_) return;
  if (!ready_ || !split_slots_.empty() || blocking_) {  // nothing of ours to flush, or no bound
    abort();
    return;
  }
  // Finalize flushes outstanding work and needs the peers; bounded, then abort (never hang in a
  // destructor, e.g. while unwinding from another rank's failure).
  try {
    settle(ncclCommFinalize(comm_), "ncclCommFinalize", deadline_after(std::chrono::seconds(10)));
    ncclCommDestroy(comm_);
  } catch (...) {
    abort();
  }
}

void NcclComm::abort() noexcept {
  // Once, whichever thread gets here first (the owner's error path or the watchdog).
  auto held = hold();
  if (!comm_ || aborted_.exchange(true)) return;
  ncclCommAbort(comm_);
  // The parent's abort ends any split still under way; a child it had already made is ours to
  // release (nobody else holds it).
  for (auto& slot : split_slots_)
    if (*slot) ncclCommAbort(*slot);
  split_slots_.clear();
}

void NcclComm::require_alive(const char* what) const {
  // After ncclCommAbort the handle is freed: no NCCL call may see it again.
  if (aborted_) throw BackendError(std::string(what) + ": the communicator was aborted after an earlier failure");
}

void NcclComm::settle(ncclResult_t r, const char* call, Clock::time_point deadline) {
  auto held = hold();
  require_alive(call);
  // A nonblocking communicator's call may return ncclSuccess with its work still under way
  // (ncclCommSplit does): only the communicator's state says it is over.
  if (r == ncclInProgress || (r == ncclSuccess && !blocking_)) return poll_ready(call, deadline);
  if (r != ncclSuccess) throw BackendError(nccl_error_message(call, r, comm_));
}

void NcclComm::poll_ready(const char* call, Clock::time_point deadline) {
  auto held = hold();
  require_alive(call);
  const auto started = Clock::now();
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) throw BackendError(nccl_error_message("ncclCommGetAsyncError", r, comm_));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) throw BackendError(nccl_error_message(call, state, comm_));
    if (cancelled_) throw BackendError(std::string(call) + ": given up: the communicator's owner failed");
    if (Clock::now() >= deadline) timed_out(call, started);
    backoff.pause();
  }
}

void NcclComm::wait(cudaEvent_t event, const char* what, Clock::time_point deadline) {
  require_alive(what);
  cudaError_t e = cudaEventQuery(event);
  if (e == cudaSuccess) return;  // done already: no watch needed
  if (e == cudaErrorNotReady) {
    if (!watchdog_) {
      watchdog_ = std::make_unique<Watchdog>(
          [this]() -> std::string {
            // A peer's failure shows here (e.g. a broken connection) long before any deadline.
            auto held = hold();
            if (aborted_) return "";
            ncclResult_t state = ncclSuccess;
            if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return "ncclCommGetAsyncError failed";
            if (state == ncclSuccess || state == ncclInProgress) return "";
            return nccl_error_message("NCCL", state, comm_);
          },
          [this] { abort(); });
    }
    const int ticket = watchdog_->watch(deadline);
    e = cudaEventSynchronize(event);  // sleeps in the driver until the GPU gets there (or aborts)
    const std::string verdict = watchdog_->done(ticket);
    if (!verdict.empty()) {
      if (verdict.rfind("timed out", 0) == 0) throw TimeoutError(std::string(what) + ": " + verdict);
      throw BackendError(std::string(what) + ": " + verdict);
    }
  }
  if (e != cudaSuccess) throw BackendError(std::string(what) + ": " + cuda_error_message("cudaEventSynchronize", e));
}

}  // namespace distrun::nccl
