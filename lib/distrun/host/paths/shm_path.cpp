#include "distrun/host/paths/shm_path.hpp"

#include <gloo/barrier.h>
#include <gloo/context.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "distrun/core/error.hpp"
#include "distrun/host/path_policy.hpp"
#include "distrun/host/paths/tcp_path.hpp"

namespace distrun {

// Lives in memory shared by the group's processes: lock-free atomics work across processes,
// and the futexes on `generation` and `bell` are shared (not process-private) ones.
struct ShmSegment {
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> generation;
  alignas(64) std::atomic<uint32_t> bell;  // bumped after every post and done: what sleepers wait on
  std::atomic<uint32_t> sleepers;          // ranks in FUTEX_WAIT on `bell` (none: no wake syscall)
};

// After the ranks' boxes, away from the lines every collective touches. Claimed once, by the
// first rank that sees a disagreement on an eager broadcast: the collective's sequence number
// << 20 | its global rank + 1; its error's text follows in `why`, and the mark counts once
// `why_ready` is set.
struct ShmMark {
  alignas(64) std::atomic<uint64_t> broken;
  std::atomic<uint32_t> why_ready;
  char why[448];
};

// One per rank, after the header: its flags on their own cache lines, then per parity of the
// sequence number (so that a rank can post collective s+1 while a slow peer still reads s) an
// intent row and an inline slot, then its eager ring (kEagerDepth entries, one per eager
// broadcast: its sequence number, the intent, the root's payload).
struct RankBox {
  alignas(64) std::atomic<uint64_t> posted;  // the last collective whose intent (row or ring) is out
  std::atomic<uint64_t> eager;               // the last one whose intent went into the ring
  std::atomic<int32_t> cpu;                  // 1 + the CPU this rank last polled on (0: not yet);
                                             // beside `posted`, which its readers poll anyway
  std::atomic<uint32_t> pulse;               // bumped as this rank polls: it is on a CPU now
  alignas(64) std::atomic<uint64_t> done;    // the last collective this rank finished reading in
};

namespace {

long futex(std::atomic<uint32_t>* addr, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, value, timeout, nullptr, 0);
}

// Reads `bytes` at `address` in process `pid` into `dst`; errno-style result (0 = done).
int read_remote(pid_t pid, uint64_t address, void* dst, size_t bytes) {
  auto* d = static_cast<char*>(dst);
  while (bytes > 0) {
    iovec local{d, bytes}, remote{reinterpret_cast<void*>(address), bytes};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return EFAULT;
    d += got;
    address += uint64_t(got);
    bytes -= size_t(got);
  }
  return 0;
}

// A random number at a fixed place in this process, drawn once: a peer that reads this value
// at the published address really reads our memory (a constant would also be found by ranks
// in separate PID namespaces that each read themselves at the same ASLR-free address).
const volatile uint64_t* process_nonce() {
  static volatile uint64_t nonce = [] {
    uint64_t v = 0;
    while (getrandom(&v, sizeof v, 0) != ssize_t(sizeof v) || v == 0) {
    }
    return v;
  }();
  return &nonce;
}

constexpr size_t round64(size_t b) { return (b + 63) / 64 * 64; }
size_t header_bytes() { return round64(sizeof(ShmSegment)); }
size_t row_bytes(int n) { return round64(sizeof(uint64_t) * Intent::words(n)); }
// An entry: its sequence number and a broadcast's intent (the header words: a broadcast has
// no per-rank ones) on two cache lines, then the payload.
constexpr size_t kEntryHead = round64(sizeof(uint64_t) * (1 + Intent::kHeaderWords));
constexpr size_t entry_bytes() { return kEntryHead + ShmPath::kEagerBytes; }
size_t box_bytes(int n) {
  return round64(sizeof(RankBox)) + 2 * row_bytes(n) + 2 * ShmPath::kInlineCapacity +
         ShmPath::kEagerDepth * entry_bytes();
}
constexpr int kMarkShift = 20;  // ShmSegment::broken: the rank's bits below the sequence number
}  // namespace

size_t ShmPath::segment_bytes(int n) { return header_bytes() + size_t(n) * box_bytes(n) + round64(sizeof(ShmMark)); }

ShmMark* ShmPath::mark() const {
  return reinterpret_cast<ShmMark*>(reinterpret_cast<char*>(shared_) + header_bytes() +
                                    size_t(size_) * box_bytes(size_));
}

RankBox* ShmPath::box(int r) const {
  return reinterpret_cast<RankBox*>(reinterpret_cast<char*>(shared_) + header_bytes() + size_t(r) * box_bytes(size_));
}
uint64_t* ShmPath::row(int r, uint64_t seq) const {
  return reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(box(r)) + round64(sizeof(RankBox)) +
                                     (seq & 1) * row_bytes(size_));
}
char* ShmPath::slot(int r, uint64_t seq) const {
  return reinterpret_cast<char*>(box(r)) + round64(sizeof(RankBox)) + 2 * row_bytes(size_) +
         (seq & 1) * kInlineCapacity;
}

std::atomic<uint64_t>& ShmPath::entry_seq(int r, uint64_t seq) const {
  char* e = slot(r, 0) + 2 * kInlineCapacity + (seq % kEagerDepth) * entry_bytes();
  return *reinterpret_cast<std::atomic<uint64_t>*>(e);
}
uint64_t* ShmPath::entry_row(int r, uint64_t seq) const { return reinterpret_cast<uint64_t*>(&entry_seq(r, seq)) + 1; }
char* ShmPath::entry_payload(int r, uint64_t seq) const {
  return reinterpret_cast<char*>(&entry_seq(r, seq)) + kEntryHead;
}

bool ShmPath::arrived(int r, uint64_t seq) const { return box(r)->posted.load(std::memory_order_acquire) >= seq; }

bool ShmPath::stated(int r, uint64_t seq, Intent& into) const {
  // An entry is rewritten kEagerDepth collectives later, once every rank is done with this one;
  // a row two later, once every rank has posted the next one: neither while we read. `eager`
  // shares `posted`'s line: a group that never broadcasts eagerly reads no entry.
  const bool eager =
      box(r)->eager.load(std::memory_order_acquire) >= seq && entry_seq(r, seq).load(std::memory_order_acquire) == seq;
  Intent::decode(eager ? entry_row(r, seq) : row(r, seq), size_, into);
  return eager;
}

void ShmPath::break_group(const CollectiveMismatchError& error) {
  box(rank_)->done.store(seq_, std::memory_order_release);  // nobody waits for our reading
  uint64_t none = 0;
  if (mark()->broken.compare_exchange_strong(none, seq_ << kMarkShift | uint64_t(global(rank_) + 1))) {
    std::strncpy(mark()->why, error.what(), sizeof mark()->why - 1);
    mark()->why_ready.store(1, std::memory_order_release);
  }
  ring();
  throw error;
}

bool ShmPath::broken() const {
  return shared_ && mark()->why_ready.load(std::memory_order_acquire) &&
         (mark()->broken.load(std::memory_order_relaxed) >> kMarkShift) <= seq_;
}

void ShmPath::check_broken() const {
  if (!broken()) return;
  const uint64_t at = mark()->broken.load(std::memory_order_relaxed);
  throw CollectiveMismatchError(
      "collective #" + std::to_string(seq_) + ": rank " + std::to_string((at & ((uint64_t(1) << kMarkShift) - 1)) - 1) +
      " found a disagreement on an eager broadcast at collective #" + std::to_string(at >> kMarkShift) + " (" +
      std::string(mark()->why) + "); every later collective of the group fails");
}

std::string ShmPath::segment_problem(int fd, int n) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return std::string("fstat failed: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (uint64_t(st.st_size) != segment_bytes(n))
    return "holds " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(segment_bytes(n));
  // Only a memfd has seals; without F_SEAL_SHRINK anyone holding it could truncate it under
  // our mapping, and the next touch of a page past the end would kill us with SIGBUS.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) return "not a sealable memfd";
  if (!(seals & F_SEAL_SHRINK)) return "not sealed against shrinking";
  return "";
}

std::unique_ptr<ShmPath> ShmPath::create(std::shared_ptr<gloo::Context> context, Store& store, int rank, int size,
                                         std::function<uint32_t()> next_tag, std::vector<int> global_ranks,
                                         size_t inline_limit) {
  if (size < 2) return nullptr;
  // Every member publishes its host (boot id), pid, and the address and value of its nonce.
  const volatile uint64_t* nonce = process_nonce();
  const std::string host = kernel_boot_id();
  std::ostringstream me;
  me << host << " " << getpid() << " " << reinterpret_cast<uint64_t>(nonce) << " " << *nonce;
  store.set("cma/" + std::to_string(rank), me.str());
  std::vector<pid_t> pids(static_cast<size_t>(size));
  bool ok = true;
  for (int r = 0; r < size; ++r) {
    std::istringstream in(store.get("cma/" + std::to_string(r)));
    std::string boot;
    uint64_t pid = 0, address = 0, value = 0, seen = 0;
    in >> boot >> pid >> address >> value;
    pids[size_t(r)] = pid_t(pid);
    ok = ok && in && value != 0 && boot == host && read_remote(pid_t(pid), address, &seen, sizeof seen) == 0 &&
         seen == value;
  }
  // Only when every member can read every other: all or none take the CMA path.
  store.set("cma/ok/" + std::to_string(rank), ok ? "1" : "0");
  for (int r = 0; r < size; ++r) ok = store.get("cma/ok/" + std::to_string(r)) == "1" && ok;
  if (!ok) return nullptr;
  std::unique_ptr<ShmPath> t(new ShmPath(std::move(context), rank, size, std::move(pids), std::move(next_tag),
                                         std::move(global_ranks), std::min(inline_limit, kInlineCapacity)));
  t->map_shared(store);
  return t;
}

bool ShmPath::map_shared(Store& store) {
  shared_bytes_ = segment_bytes(size_);
  bool ok = true;
  if (rank_ == 0) {
    shared_fd_ = memfd_create("distrun-cma", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ok = shared_fd_ >= 0 && ftruncate(shared_fd_, off_t(shared_bytes_)) == 0 &&  // zero-filled
         fcntl(shared_fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0;
    store.set("cma/segment", std::to_string(ok ? shared_fd_ : -1));
  } else {
    // Only the descriptor number comes from the store; the process is rank 0's, whose memory
    // the nonce proved we read, and the file is checked before it is mapped.
    long fd = -1;
    std::istringstream(store.get("cma/segment")) >> fd;
    const std::string path = "/proc/" + std::to_string(pids_[0]) + "/fd/" + std::to_string(fd);
    shared_fd_ = fd < 0 ? -1 : open(path.c_str(), O_RDWR | O_CLOEXEC);
    ok = shared_fd_ >= 0;
  }
  ok = ok && segment_problem(shared_fd_, size_).empty();
  void* p = ok ? mmap(nullptr, shared_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, shared_fd_, 0) : MAP_FAILED;
  ok = ok && p != MAP_FAILED;
  store.set("cma/mapped/" + std::to_string(rank_), ok ? "1" : "0");
  bool all = ok;
  for (int r = 0; r < size_; ++r) all = store.get("cma/mapped/" + std::to_string(r)) == "1" && all;
  if (all) {
    shared_ = static_cast<ShmSegment*>(p);
    return true;
  }
  if (p != MAP_FAILED) munmap(p, shared_bytes_);
  return false;
}

ShmPath::~ShmPath() {
  if (shared_) munmap(shared_, shared_bytes_);
  if (shared_fd_ >= 0) close(shared_fd_);
}

ShmPath::ShmPath(std::shared_ptr<gloo::Context> context, int rank, int size, std::vector<pid_t> pids,
                 std::function<uint32_t()> next_tag, std::vector<int> global_ranks, size_t inline_limit)
    : context_(std::move(context)), rank_(rank), size_(size), pids_(std::move(pids)), next_tag_(std::move(next_tag)),
      global_ranks_(std::move(global_ranks)), inline_limit_(inline_limit), pulses_(size_t(size_), 0) {}

const std::vector<Intent>& ShmPath::meet(Intent intent, const void* base, uint64_t extent,
                                         std::chrono::milliseconds timeout) {
  intent.seq = seq_ = seq_ + 1;
  phase_ = 0;
  intent.address = reinterpret_cast<uint64_t>(base);
  intent.extent = base ? extent : 0;
  std::vector<Intent>& table = table_;
  table.resize(size_t(size_));
  bool eager_peer = false;  // a peer stated an eager broadcast: no verdict reaches every rank
  if (shared_) {
    check_broken();
    // Our row and slot of this parity were last read in collective seq-2; every peer that
    // has posted seq-1 is past that.
    wait_all([&](int r) { return arrived(r, seq_ - 1); }, timeout, "posted");
    if (intent.extent <= inline_limit_) {
      intent.flags |= Intent::kInline;
      if (intent.extent) std::memcpy(slot(rank_, seq_), base, intent.extent);
    }
    intent.encode(row(rank_, seq_), size_);
    box(rank_)->posted.store(seq_, std::memory_order_release);
    ring();
    wait_all([&](int r) { return arrived(r, seq_); }, timeout, "posted");
    for (int r = 0; r < size_; ++r) eager_peer = stated(r, seq_, table[size_t(r)]) || eager_peer;
  } else {
    allgather_intents(context_, next_tag_(), timeout, intent, table);
  }
  try {
    check_agreement(table, true, global_ranks_);
    // Ranks that agree on an intent agree on whether it is eager.
    if (eager_peer)
      throw CollectiveMismatchError(collective_name(intent.kind) + std::string(" #") + std::to_string(seq_) +
                                    ": a peer runs an eager broadcast");
  } catch (const CollectiveMismatchError& e) {
    // Every rank that met saw the same table and throws the same error; nobody read a buffer,
    // so nobody waits for readers. A peer in an eager broadcast learns it from the mark.
    table_[size_t(rank_)].extent = 0;
    finish(timeout);
    if (eager_peer) break_group(e);
    throw;
  }
  return table;
}

bool ShmPath::broadcast_eager(const Intent& intent, void* data, std::chrono::milliseconds timeout) {
  const int root = intent.root;
  if (!shared_ || intent.kind != CollectiveKind::Broadcast || intent.bytes > std::min(kEagerBytes, inline_limit_) ||
      root < 0 || root >= size_)
    return false;
  seq_ += 1;
  phase_ = 0;
  check_broken();
  Intent mine = intent;
  mine.seq = seq_;
  // Our entry was last read in collective seq-kEagerDepth, by ranks now done with it. The
  // root's entry for this one says every rank is: a receiver normally finds it so at once.
  if (seq_ > kEagerDepth)
    wait_all([&](int r) { return box(r)->done.load(std::memory_order_acquire) + kEagerDepth >= seq_; }, timeout,
             "eager ring full");
  if (rank_ == root && intent.bytes) std::memcpy(entry_payload(rank_, seq_), data, intent.bytes);
  mine.encode(entry_row(rank_, seq_), size_);
  RankBox& me = *box(rank_);
  entry_seq(rank_, seq_).store(seq_, std::memory_order_release);
  me.eager.store(seq_, std::memory_order_release);
  me.posted.store(seq_, std::memory_order_release);
  // A root running ahead, or a receiver working through a full ring, does not wait, so does
  // not pulse in poll(): without a pulse here its peer would sleep, and every post would then
  // cost a futex wake.
  me.pulse.store(me.pulse.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // `theirs`, stated by rank r, against ours; a disagreement breaks the group.
  Intent theirs;
  auto check = [&](int r, bool eager) {
    // What check_agreement compares of two broadcasts; equal, it would pass (and costs a table).
    if (eager && theirs.kind == mine.kind && theirs.seq == mine.seq && theirs.dtype == mine.dtype &&
        theirs.op == mine.op && theirs.root == mine.root && theirs.bytes == mine.bytes)
      return;
    std::vector<Intent> pair{mine, theirs};
    if (pair[0].root == pair[1].root) pair[0].root = pair[1].root = 0;  // an index into the pair
    try {
      check_agreement(pair, false, {global(rank_), global(r)});
      if (!eager)
        throw CollectiveMismatchError("broadcast #" + std::to_string(seq_) + ": root rank " +
                                      std::to_string(global(r)) + " meets instead of an eager broadcast");
    } catch (const CollectiveMismatchError& e) {
      break_group(e);
    }
  };
  if (rank_ == root) {
    // Two ranks claiming the root: each looks for the other's entry after posting its own
    // (Dekker's pattern, as in ring()), so at least one of them sees the other.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && entry_seq(r, seq_).load(std::memory_order_acquire) == seq_ && stated(r, seq_, theirs) &&
          theirs.root == r)
        check(r, true);
    box(rank_)->done.store(seq_, std::memory_order_release);
    ring();
    return true;
  }
  // No ring() for our own entry: only a peer that meets against it (a disagreement) waits
  // for it, and a sleeper looks again within 100 ms; our done below rings.
  wait_all([&](int r) { return r != root || arrived(r, seq_); }, timeout, "the root's broadcast");
  check(root, stated(root, seq_, theirs));
  if (intent.bytes) std::memcpy(data, entry_payload(root, seq_), intent.bytes);
  box(rank_)->done.store(seq_, std::memory_order_release);
  ring();
  return true;
}

void ShmPath::run(Schedule& schedule, int phase, std::chrono::milliseconds timeout) {
  // Later phases read what the peers made of their buffers in the one before.
  if (phase > 0) barrier(timeout);
  phase_ = phase;
  // A piece folded in parts goes through scratch in parts this size, each folded while it is
  // still in cache.
  constexpr size_t kPart = size_t(256) << 10;
  schedule.pieces(phase, rank_, [&](const Piece& p) {
    const Intent& of = table_[size_t(p.peer)];
    if (p.dst) return read(p.peer, of, p.offset, p.dst, p.bytes);
    if (const char* v = view(p.peer, of, p.offset, p.bytes)) return schedule.take(p, 0, v, p.bytes);
    if (scratch_.size() < std::min(p.bytes, kPart)) scratch_.resize(std::min(p.bytes, kPart));
    for (size_t at = 0; at < p.bytes; at += kPart) {
      const size_t n = std::min(kPart, p.bytes - at);
      read(p.peer, of, p.offset + at, scratch_.data(), n);
      schedule.take(p, at, scratch_.data(), n);
    }
  });
}

void ShmPath::finish(std::chrono::milliseconds timeout) {
  if (!shared_) return barrier(timeout);
  box(rank_)->done.store(seq_, std::memory_order_release);
  ring();
  // Peers that read our buffer itself (not our slot: every phase after the first does) must
  // be done before it may change.
  const Intent& mine = table_[size_t(rank_)];
  if (mine.extent > 0 && (!(mine.flags & Intent::kInline) || phase_ > 0))
    wait_all([&](int r) { return box(r)->done.load(std::memory_order_acquire) >= seq_; }, timeout, "done");
}

void ShmPath::ring() {
  // Dekker's pattern with wait_all: we store a flag, then read `sleepers`; a sleeper counts
  // itself, then rereads the flags. The fences make one of us see the other's write, so
  // either we see it and wake it, or it sees our flag and never sleeps. With nobody asleep the
  // bell's cache line is left alone, so that posts and dones do not make the ranks fight over
  // one line.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (shared_->sleepers.load(std::memory_order_seq_cst) == 0) return;
  shared_->bell.fetch_add(1, std::memory_order_seq_cst);
  futex(&shared_->bell, FUTEX_WAKE, INT32_MAX, nullptr);
}

// How long a wait polls at most before it sleeps on a futex, while the peers it waits for are
// running. On a shared host a peer is often off its core for a few scheduler slices
// (milliseconds) while other processes run; a waiter asleep by then pays a wake-up, which
// itself waits for a slice on a busy core, in every collective (docs/performance.md, "Shared
// cores"). A peer away longer than a few slices is computing rather than descheduled, and the
// core is better given back.
constexpr auto kPollBudget = std::chrono::milliseconds(10);

// How long the peers waited for may show no sign of running (no pulse) before the waiter
// sleeps. Spinning while the only rank that can answer is off its CPU answers nothing and
// spends this rank's share of its core: the scheduler then runs the others (other sessions'
// processes, on a bound rank's one core) just when the peer comes back, and the two take
// turns, a slice per hand-over. Asleep, the waiter keeps its share and runs as soon as it is
// woken. Longer than the work of one collective (a rank folding or copying does not pulse).
std::chrono::microseconds peer_still_limit() {
  static const std::chrono::microseconds limit{[] {
    const char* v = std::getenv("DISTRUN_SHM_STILL_US");
    return v ? std::strtoll(v, nullptr, 10) : 200;
  }()};
  return limit;
}

template <typename Done, typename Awaited>
bool ShmPath::poll(Done done, Awaited awaited) {
  // Most waits are over before they start (the peer posted while we worked): no clock read.
  if (done()) return true;
  RankBox& me = *box(rank_);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now(), until = start + kPollBudget;
  const auto still_limit = peer_still_limit();
  auto moved_at = start;  // when a peer waited for last showed a new pulse
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    me.pulse.store(me.pulse.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    const auto now = Clock::now();
    // sched_yield hands the core to whatever else is runnable on it for a whole slice, so it
    // is only worth it when what we wait for may be queued behind us: a peer that last polled
    // on this very CPU (ranks that outnumber the CPUs, or unbound ones the scheduler put
    // together). Otherwise spinning keeps the core, and the peer, on another one, answers as
    // soon as it runs.
    const int32_t here = sched_getcpu() + 1;
    if (me.cpu.load(std::memory_order_relaxed) != here) me.cpu.store(here, std::memory_order_relaxed);
    bool behind_us = false;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || !awaited(r)) continue;
      const RankBox& peer = *box(r);
      behind_us = behind_us || (here > 0 && peer.cpu.load(std::memory_order_relaxed) == here);
      const uint32_t p = peer.pulse.load(std::memory_order_relaxed);
      if (p != pulses_[size_t(r)]) pulses_[size_t(r)] = p, moved_at = now;
    }
    if (behind_us) sched_yield();
    if (still_limit.count() > 0 && now - moved_at >= still_limit) return done();
    if (now >= until) return done();
  }
}

template <typename Ready>
void ShmPath::wait_all(Ready ready, std::chrono::milliseconds timeout, const char* what) {
  // A broken group stops every wait: the rank that broke it does not come.
  auto all_ready = [&] {
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && !ready(r)) return broken();
    return true;
  };
  if (poll(all_ready, [&](int r) { return !ready(r); })) return check_broken();
  sleep_on(shared_->bell, all_ready, true, timeout, [&] {
    Late late;
    std::string named;
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && !ready(r)) {
        late.ranks.push_back(global(r));
        named += (named.empty() ? "" : ", ") + std::to_string(global(r));
      }
    late.what = "waiting for rank(s) " + named + " in collective #" + std::to_string(seq_) + " (" + what + ")";
    return late;
  });
  check_broken();
}

template <typename Done, typename Waited>
void ShmPath::sleep_on(std::atomic<uint32_t>& word, Done done, bool counted, std::chrono::milliseconds timeout,
                       Waited late) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const uint32_t seen = word.load(std::memory_order_seq_cst);
    if (done()) return;
    if (Clock::now() >= deadline) {
      const Late l = late();
      throw TimeoutError("timed out after " + std::to_string(timeout.count()) + " ms " + l.what, l.ranks);
    }
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && kill(pids_[size_t(r)], 0) != 0 && errno == ESRCH)
        throw BackendError("rank " + std::to_string(global(r)) + " (process " + std::to_string(pids_[size_t(r)]) +
                           ") is gone");
    if (counted) {
      shared_->sleepers.fetch_add(1, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with ring()'s
    }
    if (!done()) {
      const timespec slice{0, 100 * 1000 * 1000};  // wake to check the peers every 100 ms
      futex(&word, FUTEX_WAIT, seen, &slice);
    }
    if (counted) shared_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

const char* ShmPath::view(int peer, const Intent& of, uint64_t offset, size_t bytes) const {
  if (phase_ > 0 || !(of.flags & Intent::kInline) || !shared_ || offset > of.extent || bytes > of.extent - offset)
    return nullptr;
  return slot(peer, seq_) + offset;
}

void ShmPath::read(int peer, const Intent& of, uint64_t offset, void* dst, size_t bytes) {
  if (bytes == 0) return;
  if (offset > of.extent || bytes > of.extent - offset)
    throw CollectiveMismatchError("reading " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                                  " of rank " + std::to_string(global(peer)) + "'s buffer, which holds " +
                                  std::to_string(of.extent));
  if (const char* v = view(peer, of, offset, bytes)) {
    std::memcpy(dst, v, bytes);
    return;
  }
  if (int err = read_remote(pids_[size_t(peer)], of.address + offset, dst, bytes))
    throw BackendError("reading rank " + std::to_string(global(peer)) + "'s buffer (process " +
                       std::to_string(pids_[size_t(peer)]) + ") failed: " + std::strerror(err));
}

void ShmPath::barrier(std::chrono::milliseconds timeout) {
  if (shared_) {
    // Sense by generation: the last to arrive resets the count, then opens the next generation.
    const uint32_t seen = shared_->generation.load(std::memory_order_acquire);
    if (shared_->arrived.fetch_add(1, std::memory_order_acq_rel) == uint32_t(size_ - 1)) {
      shared_->arrived.store(0, std::memory_order_relaxed);
      shared_->generation.fetch_add(1, std::memory_order_release);
      futex(&shared_->generation, FUTEX_WAKE, INT32_MAX, nullptr);
      return;
    }
    return wait_generation(seen, timeout);
  }
  gloo::BarrierOptions o(context_);
  o.setTag(next_tag_());
  o.setTimeout(timeout);
  gloo::barrier(o);
}

void ShmPath::wait_generation(uint32_t seen, std::chrono::milliseconds timeout) {
  auto opened = [&] { return shared_->generation.load(std::memory_order_acquire) != seen; };
  if (poll(opened, [](int) { return true; })) return;
  // The last to arrive always wakes the generation's sleepers: nobody counts itself.
  sleep_on(shared_->generation, opened, false, timeout, [&] {
    return Late{{}, "in the barrier of collective #" + std::to_string(seq_)};
  });
}

namespace {

// Shared memory: the first path tried when every member is on this host.
[[maybe_unused]] const bool registered =
    register_path({"shm", PathEntry::OneHost, 0, [](const PathGroup& g) -> std::unique_ptr<Path> {
                     PrefixStore store("shm", g.store);
                     return ShmPath::create(g.gloo(), store, g.rank, g.size, g.next_tag, g.global_ranks,
                                            size_t(g.settings.shm_inline_bytes));
                   }});

}  // namespace

}  // namespace distrun
