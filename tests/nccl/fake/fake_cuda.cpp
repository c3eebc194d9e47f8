// A stand-in for the CUDA runtime and NCCL, without a device, built as libcudart.so.<major> and
// libnccl.so.<major> for libdistrun to load instead of the real ones (LD_LIBRARY_PATH comes
// first in dlopen's search). Host memory plays device memory; every copy and collective is done
// when called (one rank: nothing to exchange); an event completes a set delay after it is
// recorded, so waits block and the watchdog runs. Ranks are threads of one process: what
// NCCL's ranks tell each other is shared here. What the tests look at:
//  - a communicator is ready (ncclCommGetAsyncError: ncclInProgress until then) once every
//    rank has joined it (init: the same unique id; split: every rank of the parent split);
//    a launch on one not ready yet is refused (ncclInvalidArgument) and counted. Two-rank
//    communicators made by init (distrun's point-to-point channels) are counted;
//  - a send's or receive's event completes once the peer has launched its matching operation
//    (the k-th send from one rank to another matches its k-th receive, per communicator), or
//    once its own rank aborted the communicator;
//  - point-to-point connections, made at the first send or receive between two ranks as NCCL
//    makes them (ncclGather, ncclScatter and ncclAlltoAll use the same), are shared with a
//    child whose parent was made with splitShare (NCCL reads the parent's config, not the
//    child's); a launch on a blocking communicator that would have to make one (and so wait
//    inline for the peer, unbounded) is counted;
//  - as NCCL 2.28 does, ncclCommSplit on a nonblocking parent returns ncclSuccess while the
//    split goes on, and writes the child's handle only once it is done (once every rank of
//    the parent has split, seen by the parent's ncclCommGetAsyncError);
//  - as NCCL 2.28 does, a group (an explicit ncclGroupStart/End, or the implicit one of a lone
//    call) on a nonblocking communicator runs in a thread of its own and returns ncclInProgress;
//    ncclCommGetAsyncError joins it. Those threads are counted; a blocking one runs inline;
//  - two threads inside NCCL on one communicator at once (NCCL forbids it) are counted;
//  - ncclGather/ncclScatter refuse null buffers, as NCCL 2.28 does under NCCL_CHECK_POINTERS=1;
//  - with "hold p2p" on, an event recorded after a send or receive stays pending (a peer that
//    never receives) until released or the communicator is aborted; a wait of the legacy
//    default stream for such an event is counted (it would park every later launch and copy);
//  - the host's waits for the device (cudaEventSynchronize) are counted;
//  - device memory is never given back to the allocator, so "was it freed" can be asked.
// The fake_* functions at the end are the tests' controls, found with dlsym.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// A send or receive that completes once its peer has launched the matching one.
struct Clique;
struct Match {
  std::shared_ptr<Clique> clique;
  int src, dst;
  int64_t k;
  bool is_send;
  bool done() const;
};
struct Event {
  std::atomic<int64_t> ready_at{0};  // ns since the clock's epoch; INT64_MAX while held
  std::vector<Match> after;          // the unmatched operations on its stream when recorded
};
struct Stream {
  bool after_p2p = false;  // the last NCCL call on it was a send or receive
  std::vector<Match> unmatched;
};
// What the ranks of one communicator share: who joined, the splits made of it, and how many
// sends and receives each ordered pair of ranks has launched.
struct Clique {
  explicit Clique(int n) : nranks(n) {}
  const int nranks;
  std::atomic<int> joined{0};
  std::mutex mu;
  std::map<int, std::shared_ptr<Clique>> splits;                   // by the parent's split number
  std::map<std::pair<int, int>, std::pair<int64_t, int64_t>> p2p;  // (src, dst): sends, receives
  std::set<int> aborted;                                           // ranks whose communicator was aborted
  bool complete() const { return joined >= nranks; }
  int64_t count(int src, int dst, bool sends) {
    std::lock_guard<std::mutex> lock(mu);
    auto& c = p2p[{src, dst}];
    return sends ? c.first : c.second;
  }
  int64_t launch(int src, int dst, bool send) {
    std::lock_guard<std::mutex> lock(mu);
    auto& c = p2p[{src, dst}];
    return send ? ++c.first : ++c.second;
  }
};
// Done once matched, or once the launching rank aborted its communicator (its kernels return).
bool Match::done() const {
  if (clique->count(src, dst, !is_send) >= k) return true;
  std::lock_guard<std::mutex> lock(clique->mu);
  return clique->aborted.count(is_send ? src : dst) > 0;
}
// A rank's point-to-point connections: (peer, is_send).
using Links = std::set<std::pair<int, bool>>;
// The thread NCCL runs a nonblocking group in, shared by the group's communicators.
struct GroupJob {
  std::thread thread;
  std::once_flag joined;
  void join() {
    std::call_once(joined, [this] { thread.join(); });
  }
};
struct Comm {
  int size = 1, rank = 0;
  bool blocking = true;
  std::shared_ptr<Clique> clique;
  std::shared_ptr<Clique> splitting;  // the split under way, until every rank has joined it
  ncclComm_t* split_slot = nullptr;   // where the split's child goes once it is done
  ncclComm_t split_child = nullptr;
  int splits = 0;
  bool share = false;  // its splits share its connections (its config's splitShare)
  std::shared_ptr<Links> links = std::make_shared<Links>();
  std::atomic<int> inside{0};
  std::shared_ptr<GroupJob> job;  // the last nonblocking group it took part in
  ~Comm() {
    if (job) job->join();
  }
};

std::atomic<int64_t> g_delay_ns{200000};
std::atomic<bool> g_hold_p2p{false};
std::atomic<bool> g_call_sleeps{true};
std::atomic<int> g_concurrent{0}, g_legacy_waits_on_pending{0}, g_group_threads{0}, g_host_syncs{0};
std::atomic<int> g_pair_comms{0}, g_not_ready_launches{0}, g_blocking_connects{0};
std::map<std::string, std::shared_ptr<Clique>> g_cliques;  // by unique id; under g_mu
thread_local int t_group_depth = 0;
thread_local std::vector<Comm*> t_group;  // the communicators of this thread's open group
std::mutex g_mu;
std::set<Event*> g_held;
std::set<const void*> g_freed;

int64_t now_ns() { return Clock::now().time_since_epoch() / std::chrono::nanoseconds(1); }
Stream* as_stream(cudaStream_t s) {
  return s && s != cudaStreamLegacy && s != cudaStreamPerThread ? reinterpret_cast<Stream*>(s) : nullptr;
}
Event* as_event(cudaEvent_t e) { return reinterpret_cast<Event*>(e); }
Comm* as_comm(ncclComm_t c) { return reinterpret_cast<Comm*>(c); }
bool pending(Event* e) {
  if (e->ready_at.load() > now_ns()) return true;
  for (const Match& m : e->after)
    if (!m.done()) return true;
  return false;
}

void release_held() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Event* e : g_held) e->ready_at = 0;
  g_held.clear();
}

// One NCCL call on `c`: counts a second thread inside at once, and stays a little while, so
// that the owner's calls and the watchdog's overlap whenever they are not serialised (unless
// a test that counts something else turned the stay off: fake_nccl_call_sleeps).
class Inside {
 public:
  Inside(ncclComm_t c, int us) : c_(as_comm(c)) {
    if (c_ && c_->inside.fetch_add(1) != 0) ++g_concurrent;
    if (g_call_sleeps && us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
  ~Inside() {
    if (c_) --c_->inside;
  }

 private:
  Comm* c_;
};

// The end of a group: inline when every communicator in it is blocking, else in a new thread.
ncclResult_t end_group(std::vector<Comm*> comms) {
  bool nonblocking = false;
  for (Comm* c : comms) nonblocking |= !c->blocking;
  if (!nonblocking) return ncclSuccess;
  auto job = std::make_shared<GroupJob>();
  ++g_group_threads;
  job->thread = std::thread([] {});
  for (Comm* c : comms) {
    if (c->job) c->job->join();
    c->job = job;
  }
  return ncclInProgress;
}

// A call that joins `comm` to this thread's group, or is a group of its own.
ncclResult_t join_group(ncclComm_t comm) {
  if (t_group_depth > 0) {
    t_group.push_back(as_comm(comm));
    return ncclSuccess;
  }
  return end_group({as_comm(comm)});
}

// The connections a launch by `c` needs, made on a nonblocking communicator, counted when a
// blocking one would have to make them.
void connect(Comm* c, const std::vector<std::pair<int, bool>>& needed) {
  for (const auto& link : needed)
    if (c->links->insert(link).second && c->blocking) ++g_blocking_connects;
}

ncclResult_t launch(ncclComm_t comm, cudaStream_t stream, bool p2p, const void* in = nullptr, void* out = nullptr,
                    size_t bytes = 0) {
  Inside inside(comm, 20);
  if (!as_comm(comm)->clique->complete()) {
    ++g_not_ready_launches;
    return ncclInvalidArgument;
  }
  if (in && out && in != out && as_comm(comm)->size == 1) std::memmove(out, in, bytes);
  if (Stream* s = as_stream(stream)) s->after_p2p = p2p;
  return join_group(comm);
}

// A send to or receive from `peer`: connected, counted, and matched by the events after it.
ncclResult_t p2p(ncclComm_t comm, cudaStream_t stream, int peer, bool is_send) {
  const ncclResult_t r = launch(comm, stream, true);
  if (r != ncclSuccess && r != ncclInProgress) return r;
  Comm* c = as_comm(comm);
  connect(c, {{peer, is_send}});
  const int src = is_send ? c->rank : peer, dst = is_send ? peer : c->rank;
  const int64_t k = c->clique->launch(src, dst, is_send);
  if (Stream* st = as_stream(stream)) st->unmatched.push_back({c->clique, src, dst, k, is_send});
  return r;
}

// The connections of a rooted operation (ncclGather: to_root; ncclScatter: from the root).
ncclResult_t rooted(ncclComm_t comm, cudaStream_t s, int root, bool to_root, const void* in, void* out, size_t bytes) {
  Comm* c = as_comm(comm);
  std::vector<std::pair<int, bool>> needed;
  for (int r = 0; r < c->size && bytes > 0; ++r)
    if (r != c->rank && (c->rank == root || r == root)) needed.push_back({r, (c->rank == root) != to_root});
  const ncclResult_t res = launch(comm, s, false, in, out, bytes);
  if (res == ncclSuccess || res == ncclInProgress) connect(c, needed);
  return res;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
  }
}

}  // namespace

extern "C" {

// --- CUDA runtime: two devices, or as many as CUDA_VISIBLE_DEVICES lists (as CUDA counts them:
// none for an empty list); a driver as new as the runtime; no memory pools.
cudaError_t cudaGetDeviceCount(int* count) {
  const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
  *count = mask ? 0 : 2;
  for (const char* p = mask; p && *p; ++p)
    if (p == mask || p[-1] == ',') ++*count;
  return *count ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "fake CUDA error"; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr, int) {
  *value = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  std::snprintf(id, size_t(len), "0000:%02x:00.0", device);
  return cudaSuccess;
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t*, int) { return cudaErrorNotSupported; }
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, enum cudaMemPoolAttr, void*) { return cudaErrorNotSupported; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  *s = reinterpret_cast<cudaStream_t>(new Stream);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete as_stream(s);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  *e = reinterpret_cast<cudaEvent_t>(new Event);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_held.erase(as_event(e));
  delete as_event(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  Stream* st = as_stream(s);
  if (st) {
    auto& u = st->unmatched;
    u.erase(std::remove_if(u.begin(), u.end(), [](const Match& m) { return m.done(); }), u.end());
    as_event(e)->after = u;
  }
  if (g_hold_p2p && st && st->after_p2p) {
    std::lock_guard<std::mutex> lock(g_mu);
    as_event(e)->ready_at = INT64_MAX;
    g_held.insert(as_event(e));
  } else {
    as_event(e)->ready_at = now_ns() + g_delay_ns;
  }
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return pending(as_event(e)) ? cudaErrorNotReady : cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  ++g_host_syncs;
  while (pending(as_event(e))) std::this_thread::sleep_for(std::chrono::microseconds(50));
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = float(as_event(end)->ready_at - as_event(start)->ready_at) / 1e6f;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  if (s == cudaStreamLegacy && pending(as_event(e))) ++g_legacy_waits_on_pending;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t size) {
  *p = std::malloc(size ? size : 1);
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_freed.insert(p);  // never reused: a test can ask whether it was freed
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** p, size_t size, cudaStream_t) { return cudaMalloc(p, size); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int) {
  *p = std::malloc(size);
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t count) {
  std::memset(p, value, count);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind, cudaStream_t) {
  std::memmove(dst, src, count);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind) {
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}

// --- NCCL 2.28's calls, on communicators that are ready at once.
ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  for (char& c : id->internal) c = char(std::rand());
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t) { return "fake NCCL error"; }
const char* ncclGetLastError(ncclComm_t) { return ""; }
bool blocking_of(const ncclConfig_t* config) { return !config || config->blocking != 0; }  // UNDEF: blocking
bool shares_of(const ncclConfig_t* config) { return config && config->splitShare == 1; }   // UNDEF: not
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  Comm* c = new Comm;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto& clique = g_cliques[std::string(id.internal, sizeof(id.internal))];
    if (!clique) clique = std::make_shared<Clique>(nranks);
    c->clique = clique;
  }
  ++c->clique->joined;
  if (nranks == 2) ++g_pair_comms;
  c->size = nranks;
  c->rank = rank;
  c->blocking = blocking_of(config);
  c->share = shares_of(config);
  *comm = reinterpret_cast<ncclComm_t>(c);
  return ncclSuccess;
}
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* child, ncclConfig_t* config) {
  Inside inside(comm, 0);
  *child = nullptr;
  Comm* parent = as_comm(comm);
  {
    std::lock_guard<std::mutex> lock(parent->clique->mu);
    auto& clique = parent->clique->splits[parent->splits++];
    if (!clique) clique = std::make_shared<Clique>(parent->size);  // every rank of the parent takes part
    parent->splitting = clique;
  }
  ++parent->splitting->joined;
  parent->split_slot = child;
  parent->split_child = nullptr;
  if (color != NCCL_SPLIT_NOCOLOR) {
    Comm* c = new Comm;
    c->rank = key;
    c->size = parent->size;  // the tests split into the whole group
    c->blocking = blocking_of(config);
    c->share = shares_of(config);
    c->clique = parent->splitting;
    if (parent->share) c->links = parent->links;
    parent->split_child = reinterpret_cast<ncclComm_t>(c);
  }
  // A job of the parent's, nonblocking as the parent is; its ncclInProgress is not returned.
  const ncclResult_t r = join_group(comm);
  if (parent->blocking) *child = parent->split_child;
  return r == ncclInProgress ? ncclSuccess : r;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  Inside inside(comm, 50);
  Comm* c = as_comm(comm);
  if (auto& job = c->job) job->join();
  if (c->splitting && c->splitting->complete()) {
    c->splitting.reset();
    if (c->split_slot) *c->split_slot = c->split_child;
    c->split_slot = nullptr;
  }
  *state = c->clique->complete() && !c->splitting ? ncclSuccess : ncclInProgress;
  return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  Inside inside(comm, 0);
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete as_comm(comm);
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  release_held();  // an abort makes the kernels return
  {
    Comm* c = as_comm(comm);
    std::lock_guard<std::mutex> lock(c->clique->mu);
    c->clique->aborted.insert(c->rank);
  }
  delete as_comm(comm);
  return ncclSuccess;
}
ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<Comm*> comms;
  comms.swap(t_group);
  return end_group(std::move(comms));
}
ncclResult_t ncclAllReduce(const void* in, void* out, size_t count, ncclDataType_t dt, ncclRedOp_t, ncclComm_t comm,
                           cudaStream_t s) {
  return launch(comm, s, false, in, out, count * type_size(dt));
}
ncclResult_t ncclBroadcast(const void* in, void* out, size_t count, ncclDataType_t dt, int, ncclComm_t comm,
                           cudaStream_t s) {
  return launch(comm, s, false, in, out, count * type_size(dt));
}
ncclResult_t ncclReduce(const void* in, void* out, size_t count, ncclDataType_t dt, ncclRedOp_t, int, ncclComm_t comm,
                        cudaStream_t s) {
  return launch(comm, s, false, in, out, count * type_size(dt));
}
ncclResult_t ncclAllGather(const void* in, void* out, size_t count, ncclDataType_t dt, ncclComm_t comm,
                           cudaStream_t s) {
  return launch(comm, s, false, in, out, count * type_size(dt));
}
ncclResult_t ncclReduceScatter(const void* in, void* out, size_t count, ncclDataType_t dt, ncclRedOp_t, ncclComm_t comm,
                               cudaStream_t s) {
  return launch(comm, s, false, in, out, count * type_size(dt));
}
ncclResult_t ncclAlltoAll(const void* in, void* out, size_t count, ncclDataType_t dt, ncclComm_t comm, cudaStream_t s) {
  const ncclResult_t r = launch(comm, s, false, in, out, count * type_size(dt));
  Comm* c = as_comm(comm);
  std::vector<std::pair<int, bool>> needed;
  for (int p = 0; p < c->size && count > 0; ++p)
    if (p != c->rank) needed.insert(needed.end(), {{p, true}, {p, false}});
  if (r == ncclSuccess || r == ncclInProgress) connect(c, needed);
  return r;
}
ncclResult_t ncclGather(const void* in, void* out, size_t count, ncclDataType_t dt, int root, ncclComm_t comm,
                        cudaStream_t s) {
  if (!in || !out) return ncclInvalidArgument;
  return rooted(comm, s, root, true, in, out, count * type_size(dt));
}
ncclResult_t ncclScatter(const void* in, void* out, size_t count, ncclDataType_t dt, int root, ncclComm_t comm,
                         cudaStream_t s) {
  if (!in || !out) return ncclInvalidArgument;
  return rooted(comm, s, root, false, in, out, count * type_size(dt));
}
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int peer, ncclComm_t comm, cudaStream_t s) {
  return p2p(comm, s, peer, true);
}
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int peer, ncclComm_t comm, cudaStream_t s) {
  return p2p(comm, s, peer, false);
}

// --- The tests' controls.
void fake_cuda_set_event_delay_us(int us) { g_delay_ns = int64_t(us) * 1000; }
void fake_cuda_hold_p2p(bool hold) { g_hold_p2p = hold; }
void fake_nccl_call_sleeps(bool on) { g_call_sleeps = on; }
void fake_cuda_release_p2p() { release_held(); }
int fake_cuda_legacy_waits_on_pending() { return g_legacy_waits_on_pending; }
bool fake_cuda_was_freed(const void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_freed.count(p) > 0;
}
int fake_nccl_concurrent_calls() { return g_concurrent; }
int fake_nccl_group_threads() { return g_group_threads; }
int fake_cuda_host_syncs() { return g_host_syncs; }
int fake_nccl_pair_comms() { return g_pair_comms; }
int fake_nccl_not_ready_launches() { return g_not_ready_launches; }
int fake_nccl_blocking_connects() { return g_blocking_connects; }

}  // extern "C"
