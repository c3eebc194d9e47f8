#include "distrun/host/algorithms.hpp"

#include <algorithm>
#include <cstring>

namespace distrun {

namespace {

// std::memcpy for what a zero-size collective passes too: no bytes, and buffers that may be
// null (memcpy's arguments must not be, even for no bytes).
void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

// Up to this many bytes per rank the direct algorithms win on any path: one round of
// messages instead of the ring's n-1 (on shared memory they win at every size).
constexpr uint64_t kSmall = uint64_t(64) << 10;

int mod(int i, int n) { return ((i % n) + n) % n; }

using Emit = std::function<void(const Piece&)>;

// One phase in which each reader takes, from every peer p != reader in rank order, the piece
// `of(reader, p)` (0 bytes: nothing), copied to its dst.
template <typename Of>
class DirectCopy : public Schedule {
 public:
  DirectCopy(int size, Of of) : size_(size), of_(std::move(of)) {}
  int phases() const override { return 1; }
  void pieces(int, int reader, const Emit& emit) const override {
    for (int p = 0; p < size_; ++p)
      if (p != reader)
        if (Piece piece = of_(reader, p); piece.bytes > 0) emit(piece);
  }
  void take(const Piece&, size_t, const char*, size_t) override {}

 private:
  int size_;
  Of of_;
};
template <typename Of>
DirectCopy<Of> direct_copy(int size, Of of) {
  return DirectCopy<Of>(size, std::move(of));
}

// One phase in which `reader` (every rank when -1) takes the same range of every peer's buffer
// and folds each, in rank order, into `into`: [offset, offset + bytes). With `own`
// (reduce_scatter) each reader takes its own block, [r * offset, r * offset + bytes), and the
// first peer's piece is folded with `own` rather than into what `into` holds: nothing is
// written to `into` before the first piece arrives (after the intents agree).
class DirectFold : public Schedule {
 public:
  DirectFold(int size, int reader, uint64_t offset, size_t bytes, char* into, size_t element_size, ReduceFn fn,
             const char* own = nullptr)
      : size_(size), reader_(reader), offset_(offset), bytes_(bytes), into_(into), es_(element_size), fn_(fn),
        own_(own) {}
  int phases() const override { return 1; }
  void pieces(int, int reader, const Emit& emit) const override {
    if ((reader_ >= 0 && reader != reader_) || bytes_ == 0) return;
    const uint64_t offset = own_ ? uint64_t(reader) * offset_ : offset_;
    for (int p = 0; p < size_; ++p)
      if (p != reader) emit(Piece{p, offset, bytes_, nullptr});
  }
  void take(const Piece& piece, size_t at, const char* data, size_t bytes) override {
    if (first_peer_ < 0) first_peer_ = piece.peer;  // pieces come in the order they were emitted
    const bool first = own_ && piece.peer == first_peer_;
    fn_(into_ + at, first ? own_ + at : into_ + at, data, bytes / es_);
  }

 private:
  int size_, reader_;
  uint64_t offset_;
  size_t bytes_;
  char* into_;
  size_t es_;
  ReduceFn fn_;
  const char* own_;
  int first_peer_ = -1;
};

// Through the path's hub (Path::hub), two phases: in phase 0 the hub takes `in(p)` of every
// peer p in rank order (the bytes that rode with p's intent), copied to its dst or, without
// one, folded into `sum` (the hub's exposed buffer, which holds the hub's own part already);
// in phase 1 every other rank takes `out(reader)` of the hub's buffer. A small collective so
// costs 2(n - 1) messages, each rank's intent and the hub's answer riding on them (a peer's
// buffer past the path's eager bytes goes in a message of its own).
class Star : public Schedule {
 public:
  using Of = std::function<Piece(int)>;
  Star(int size, int hub, Of in, Of out, char* sum = nullptr, size_t element_size = 0, ReduceFn fn = nullptr)
      : size_(size), hub_(hub), in_(std::move(in)), out_(std::move(out)), sum_(sum), es_(element_size), fn_(fn) {}
  int phases() const override { return 2; }
  void pieces(int phase, int reader, const Emit& emit) const override {
    if (phase == 0 && reader == hub_) {
      for (int p = 0; p < size_; ++p)
        if (p != hub_)
          if (Piece piece = in_(p); piece.bytes > 0) emit(piece);
    } else if (phase == 1 && reader != hub_) {
      if (Piece piece = out_(reader); piece.bytes > 0) emit(piece);
    }
  }
  void take(const Piece& piece, size_t at, const char* data, size_t bytes) override {
    char* into = sum_ + piece.offset + at;
    fn_(into, into, data, bytes / es_);
  }

 private:
  int size_, hub_;
  Of in_, out_;
  char* sum_;
  size_t es_;
  ReduceFn fn_;
};

// Block b of `count` elements cut into n: elements [b*chunk, ...), possibly empty at the end.
struct Blocks {
  Blocks(size_t count, size_t es, int n) : count(count), es(es), chunk((count + size_t(n) - 1) / size_t(n)), n(n) {}
  uint64_t at(int b) const { return std::min(size_t(mod(b, n)) * chunk, count) * es; }
  size_t len(int b) const { return std::min(size_t(mod(b, n)) * chunk + chunk, count) * es - at(b); }
  size_t count, es, chunk;
  int n;
};

// Small all_reduce, direct: every rank takes every peer's whole buffer and folds them all, its
// own included, in rank order into `sum` (so every rank gets the same bits).
class AllReduceSmall : public Schedule {
 public:
  AllReduceSmall(int rank, int size, const char* mine, char* sum, size_t bytes, size_t es, ReduceFn fn)
      : rank_(rank), size_(size), mine_(mine), sum_(sum), bytes_(bytes), es_(es), fn_(fn) {
    if (rank_ == 0) copy_bytes(sum_, mine_, bytes_), own_added_ = true;
  }
  int phases() const override { return 1; }
  void pieces(int, int reader, const Emit& emit) const override {
    for (int p = 0; p < size_ && bytes_ > 0; ++p)
      if (p != reader) emit(Piece{p, 0, bytes_, nullptr});
  }
  void take(const Piece& piece, size_t at, const char* data, size_t bytes) override {
    // Every lower rank is in: ours goes next.
    if (at == 0 && piece.peer > rank_ && !own_added_) fn_(sum_, sum_, mine_, bytes_ / es_), own_added_ = true;
    if (piece.peer == 0)
      copy_bytes(sum_ + at, data, bytes);
    else
      fn_(sum_ + at, sum_ + at, data, bytes / es_);
  }
  // After the phase (our buffer is unchanged until we write the sum into it): ours, when we
  // are the last rank.
  void close() {
    if (!own_added_) fn_(sum_, sum_, mine_, bytes_ / es_);
  }

 private:
  int rank_, size_;
  const char* mine_;
  char* sum_;
  size_t bytes_, es_;
  ReduceFn fn_;
  bool own_added_ = false;
};

// An all_reduce in place over `data` cut into blocks: a piece without dst is added into our
// copy of the same block (the offset is the same in every rank's buffer).
class AllReduceInPlace : public Schedule {
 public:
  AllReduceInPlace(int size, Blocks blocks, char* data, ReduceFn fn) : size_(size), b_(blocks), data_(data), fn_(fn) {}
  void take(const Piece& piece, size_t at, const char* data, size_t bytes) override {
    char* into = data_ + piece.offset + at;
    fn_(into, into, data, bytes / b_.es);
  }

 protected:
  int size_;
  Blocks b_;
  char* data_;
  ReduceFn fn_;
};

// Large all_reduce, direct. Phase 0: every rank reduces its own block in place from the
// peers' copies of it (no rank writes any other block of its buffer in this phase). Phase 1:
// every rank takes each peer's finished block.
class AllReduceDirect : public AllReduceInPlace {
 public:
  using AllReduceInPlace::AllReduceInPlace;
  int phases() const override { return 2; }
  void pieces(int phase, int reader, const Emit& emit) const override {
    for (int p = 0; p < size_; ++p) {
      if (p == reader) continue;
      const int block = phase == 0 ? reader : p;
      if (b_.len(block) > 0) emit(Piece{p, b_.at(block), b_.len(block), phase == 0 ? nullptr : data_ + b_.at(block)});
    }
  }
};

// all_reduce, ring, in place. Phase s < n-1: take the left neighbour's block r-s-2 (the sum of
// s+1 ranks) and add it into ours. Phase n-1+t: take its finished block r-t-1. Each phase
// reads a block the neighbour finished in the phase before and writes one it does not read.
class AllReduceRing : public AllReduceInPlace {
 public:
  using AllReduceInPlace::AllReduceInPlace;
  int phases() const override { return 2 * (size_ - 1); }
  void pieces(int phase, int reader, const Emit& emit) const override {
    const bool summing = phase < size_ - 1;
    const int block = summing ? reader - phase - 2 : reader - (phase - (size_ - 1)) - 1;
    if (b_.len(block) > 0)
      emit(Piece{mod(reader - 1, size_), b_.at(block), b_.len(block), summing ? nullptr : data_ + b_.at(block)});
  }
};

// all_gather, ring: the own block is in `out` already; phase s takes the left neighbour's
// block r-s-1 of its `out` (it got that block in phase s-1, or it is its own).
class AllGatherRing : public Schedule {
 public:
  AllGatherRing(int size, size_t bytes, char* out) : size_(size), bytes_(bytes), out_(out) {}
  int phases() const override { return size_ - 1; }
  void pieces(int phase, int reader, const Emit& emit) const override {
    const uint64_t at = uint64_t(mod(reader - phase - 1, size_)) * bytes_;
    if (bytes_ > 0) emit(Piece{mod(reader - 1, size_), at, bytes_, out_ + at});
  }
  void take(const Piece&, size_t, const char*, size_t) override {}

 private:
  int size_;
  size_t bytes_;
  char* out_;
};

// reduce_scatter, ring. Each rank exposes `partial`, n blocks of which only some are ever
// written: before phase 0, block r-1 holds its input block r-1 (where its right neighbour
// starts). Phase s takes the left's partial block r-s-2 (the sum of s+1 ranks' inputs), adds
// our input block r-s-2 and leaves the sum at the same place of ours, or in `out` after the
// last phase (block r, complete). Each phase reads a block the neighbour wrote in the one
// before and writes one it does not read.
class ReduceScatterRing : public Schedule {
 public:
  ReduceScatterRing(int rank, int size, size_t bytes, const char* in, char* partial, char* out, size_t es, ReduceFn fn)
      : rank_(rank), size_(size), bytes_(bytes), in_(in), partial_(partial), out_(out), es_(es), fn_(fn) {}
  int phases() const override { return size_ - 1; }
  void pieces(int phase, int reader, const Emit& emit) const override {
    if (bytes_ > 0)
      emit(Piece{mod(reader - 1, size_), uint64_t(mod(reader - phase - 2, size_)) * bytes_, bytes_, nullptr});
  }
  void take(const Piece& piece, size_t at, const char* data, size_t bytes) override {
    const size_t block = size_t(piece.offset / bytes_);
    const bool last = mod(rank_ - 2 - int(block), size_) == size_ - 2;  // the phase that took it
    char* into = (last ? out_ : partial_ + block * bytes_) + at;
    fn_(into, data, in_ + block * bytes_ + at, bytes / es_);
  }

 private:
  int rank_, size_;
  size_t bytes_;
  const char* in_;
  char* partial_;
  char* out_;
  size_t es_;
  ReduceFn fn_;
};

// One call of a collective over the group's path: what every kind's schedule works with.
struct Call {
  Path& path;
  int rank, size;
  Algorithm algorithm;
  std::vector<char>& scratch;
  std::chrono::milliseconds timeout;

  // Ring for all_reduce, all_gather and reduce_scatter with `bytes` per rank's payload?
  bool ring(uint64_t bytes) const {
    if (size < 2) return false;
    if (algorithm != Algorithm::Auto) return algorithm == Algorithm::Ring;
    if (size == 2) return false;  // two ranks: the ring is the direct algorithm, in more phases
    return !path.reads_peers() && bytes > kSmall;
  }
  // Through the hub, for a small collective: a rank's larger buffer (what the hub moves for
  // each peer) within kSmall? Where the path has one, the check goes through it whatever the
  // schedule; DISTRUN_ALGO=direct or ring keeps the data off it.
  int hub(const Intent& intent) const {
    return algorithm == Algorithm::Auto && larger_buffer(intent.kind, intent.bytes, size_t(size)) <= kSmall &&
                   !path.reads_peers()
               ? path.hub()
               : -1;
  }
  // Runs every phase of `schedule` (made from the table `meet` returned), then finishes;
  // `between` (if any) after phase 0, once the check is settled where it runs.
  void drive(Schedule& schedule, const std::function<void()>& between = {}) const {
    for (int p = 0; p < schedule.phases(); ++p) {
      if (p == 1 && between) between();
      path.run(schedule, p, timeout);
    }
    path.finish(timeout);
  }
  char* scratch_of(size_t bytes) const {
    if (scratch.size() < bytes) scratch.resize(bytes);
    return scratch.data();
  }
};

// Each kind's schedule; `bytes` is intent.bytes, a block. A rank writes its own part of an
// output after the phases, so a collective whose check fails leaves its outputs untouched.

// Each rank's `bytes` at `in`, in rank order, into `out` (size blocks).
void all_gather(const Call& c, const HostOp& op) {
  const size_t bytes = op.intent.bytes, all = bytes * size_t(c.size);
  auto* o = static_cast<char*>(op.out);
  if (const int hub = c.hub(op.intent); hub >= 0) {  // the hub gathers into its `out`, then hands it out
    const bool at_hub = c.rank == hub;
    c.path.meet(op.intent, at_hub ? op.out : op.in, at_hub ? all : bytes, c.timeout);
    Star s(
        c.size, hub,
        [&](int p) {
          return Piece{p, 0, bytes, o + size_t(p) * bytes};
        },
        [&](int) {
          return Piece{hub, 0, all, o};
        });
    return c.drive(s, [&] {
      if (at_hub) copy_bytes(o + size_t(c.rank) * bytes, op.in, bytes);
    });
  }
  if (c.ring(bytes)) {
    copy_bytes(o + size_t(c.rank) * bytes, op.in, bytes);
    c.path.meet(op.intent, op.out, bytes * size_t(c.size), c.timeout);
    AllGatherRing s(c.size, bytes, o);
    return c.drive(s);
  }
  c.path.meet(op.intent, op.in, bytes, c.timeout);
  auto s = direct_copy(c.size, [&](int, int p) { return Piece{p, 0, bytes, o + size_t(p) * bytes}; });
  c.drive(s);
  copy_bytes(o + size_t(c.rank) * bytes, op.in, bytes);
}

// As all_gather, into the root's `out` only (elsewhere `out` may be null).
void gather(const Call& c, const HostOp& op) {
  const size_t bytes = op.intent.bytes, all = bytes * size_t(c.size);
  const int root = op.intent.root;
  auto* o = static_cast<char*>(op.out);
  if (const int hub = c.hub(op.intent); hub >= 0) {  // the hub gathers, then hands all to the root
    const bool at_hub = c.rank == hub;
    char* into = at_hub ? (hub == root ? o : c.scratch_of(all)) : nullptr;
    c.path.meet(op.intent, at_hub ? into : op.in, at_hub ? all : bytes, c.timeout);
    Star s(
        c.size, hub,
        [&](int p) {
          return Piece{p, 0, bytes, into + size_t(p) * bytes};
        },
        [&](int reader) {
          return reader == root ? Piece{hub, 0, all, o} : Piece{};
        });
    return c.drive(s, [&] {
      if (at_hub) copy_bytes(into + size_t(c.rank) * bytes, op.in, bytes);
    });
  }
  c.path.meet(op.intent, c.rank == root ? nullptr : op.in, bytes, c.timeout);
  auto s = direct_copy(c.size, [&](int reader, int p) {
    return reader == root ? Piece{p, 0, bytes, o + size_t(p) * bytes} : Piece{};
  });
  c.drive(s);
  if (c.rank == root) copy_bytes(o + size_t(c.rank) * bytes, op.in, bytes);
}

// Block `rank` of the root's `in` (size blocks) into `out`.
void scatter(const Call& c, const HostOp& op) {
  const size_t bytes = op.intent.bytes, all = bytes * size_t(c.size);
  const int root = op.intent.root;
  if (const int hub = c.hub(op.intent); hub >= 0) {  // the root's blocks go to the hub, which hands them out
    const bool at_hub = c.rank == hub;
    const char* from = c.rank == root ? static_cast<const char*>(op.in) : nullptr;
    char* relay = at_hub && hub != root ? c.scratch_of(all) : nullptr;
    c.path.meet(op.intent, relay ? relay : from, all, c.timeout);
    Star s(
        c.size, hub,
        [&](int p) {
          return p == root ? Piece{p, 0, all, relay} : Piece{};
        },
        [&](int reader) {
          return reader == root ? Piece{} : Piece{hub, uint64_t(reader) * bytes, bytes, static_cast<char*>(op.out)};
        });
    c.drive(s);
    if (relay) from = relay;
    if (from) copy_bytes(op.out, from + size_t(c.rank) * bytes, bytes);
    return;
  }
  c.path.meet(op.intent, c.rank == root ? op.in : nullptr, bytes * size_t(c.size), c.timeout);
  auto s = direct_copy(c.size, [&](int reader, int p) {
    return p == root ? Piece{p, uint64_t(reader) * bytes, bytes, static_cast<char*>(op.out)} : Piece{};
  });
  c.drive(s);
  if (c.rank == root) copy_bytes(op.out, static_cast<const char*>(op.in) + size_t(c.rank) * bytes, bytes);
}

// The root's `bytes` at `out` into every rank's `out`.
void broadcast(const Call& c, const HostOp& op) {
  const size_t bytes = op.intent.bytes;
  const int root = op.intent.root;
  if (c.path.broadcast_eager(op.intent, op.out, c.timeout)) return;
  if (const int hub = c.hub(op.intent); hub >= 0) {  // the root's bytes go to the hub, which hands them out
    auto* o = static_cast<char*>(op.out);
    c.path.meet(op.intent, c.rank == root || c.rank == hub ? o : nullptr, bytes, c.timeout);
    Star s(
        c.size, hub,
        [&](int p) {
          return p == root ? Piece{p, 0, bytes, o} : Piece{};
        },
        [&](int reader) {
          return reader == root ? Piece{} : Piece{hub, 0, bytes, o};
        });
    return c.drive(s);
  }
  c.path.meet(op.intent, c.rank == root ? op.out : nullptr, bytes, c.timeout);
  auto s = direct_copy(c.size, [&](int, int p) {
    return p == root ? Piece{p, 0, bytes, static_cast<char*>(op.out)} : Piece{};
  });
  c.drive(s);
}

// intent.send_bytes[j] at in + intent.send_offset[j] go to rank j; the received blocks land in
// rank order in `out` (intent.recv_bytes[j] from rank j).
void all_to_all(const Call& c, const HostOp& op) {
  const uint64_t extent = readable_bytes(op.intent, c.rank, c.size);
  const auto& table = c.path.meet(op.intent, op.in, extent, c.timeout);
  const Intent& mine = table[size_t(c.rank)];  // as stated, read back from the table
  auto* o = static_cast<char*>(op.out);
  // Where the block from rank p lands in `out`: the blocks in rank order.
  std::vector<size_t> at(size_t(c.size) + 1, 0);
  for (int p = 0; p < c.size; ++p) at[size_t(p) + 1] = at[size_t(p)] + mine.recv_bytes[size_t(p)];
  auto s = direct_copy(c.size, [&](int reader, int p) {
    const Intent& from = table[size_t(p)];
    return Piece{p, from.send_offset[size_t(reader)], size_t(from.send_bytes[size_t(reader)]),
                 reader == c.rank ? o + at[size_t(p)] : nullptr};
  });
  c.drive(s);
  if (mine.recv_bytes[size_t(c.rank)] != 0)  // an empty block may come with null buffers
    copy_bytes(o + at[size_t(c.rank)], static_cast<const char*>(op.in) + mine.send_offset[size_t(c.rank)],
               mine.recv_bytes[size_t(c.rank)]);
}

// Through the hub: it folds every rank's `whole` bytes at `own` into its scratch, its own
// first, and every other rank takes `out(reader)` of the sum. Returns the sum at the hub, else
// nullptr; a rank's buffers change only where `out` says.
const char* sum_at_hub(const Call& c, const HostOp& op, const char* own, size_t whole, const Star::Of& out) {
  const int hub = c.path.hub();
  char* sum = c.rank == hub ? c.scratch_of(whole) : nullptr;
  if (sum) copy_bytes(sum, own, whole);
  c.path.meet(op.intent, sum ? sum : own, whole, c.timeout);
  Star s(
      c.size, hub,
      [&](int p) {
        return Piece{p, 0, whole, nullptr};
      },
      out, sum, op.element_size, op.fn);
  c.drive(s);
  return sum;
}

// Block `rank` of the reduction of every rank's `in` (size blocks) into `out`.
void reduce_scatter(const Call& c, const HostOp& op) {
  const size_t bytes = op.intent.bytes, all = bytes * size_t(c.size);
  const auto* i = static_cast<const char*>(op.in);
  if (const int hub = c.hub(op.intent); hub >= 0) {  // the hub sums every block, then hands each out
    const char* sum = sum_at_hub(c, op, i, all, [&](int reader) {
      return Piece{hub, uint64_t(reader) * bytes, bytes, static_cast<char*>(op.out)};
    });
    if (sum) copy_bytes(op.out, sum + size_t(c.rank) * bytes, bytes);
    return;
  }
  if (c.ring(bytes)) {
    const size_t left_starts = size_t(mod(c.rank - 1, c.size)) * bytes;
    char* partial = c.scratch_of(bytes * size_t(c.size));
    copy_bytes(partial + left_starts, i + left_starts, bytes);
    c.path.meet(op.intent, partial, bytes * size_t(c.size), c.timeout);
    ReduceScatterRing s(c.rank, c.size, bytes, i, partial, static_cast<char*>(op.out), op.element_size, op.fn);
    return c.drive(s);
  }
  c.path.meet(op.intent, op.in, bytes * size_t(c.size), c.timeout);
  DirectFold s(c.size, -1, bytes, bytes, static_cast<char*>(op.out), op.element_size, op.fn,
               i + size_t(c.rank) * bytes);
  c.drive(s);
  if (c.size == 1) copy_bytes(op.out, i, bytes);
}

// reduce (into the root's `out`) or all_reduce (into every rank's) through the hub.
void reduce_at_hub(const Call& c, const HostOp& op, bool everyone) {
  const size_t bytes = op.intent.bytes;
  const int hub = c.path.hub(), root = op.intent.root;
  auto* d = static_cast<char*>(op.out);
  const char* sum = sum_at_hub(c, op, d, bytes, [&](int reader) {
    return everyone || reader == root ? Piece{hub, 0, bytes, d} : Piece{};
  });
  if (sum && (everyone || c.rank == root)) copy_bytes(d, sum, bytes);
}

// The reduction of every rank's `out` into the root's `out` (the others' are left as they were).
void reduce(const Call& c, const HostOp& op) {
  const size_t bytes = op.intent.bytes;
  const int root = op.intent.root;
  if (c.hub(op.intent) >= 0) return reduce_at_hub(c, op, false);
  c.path.meet(op.intent, c.rank == root ? nullptr : op.out, bytes, c.timeout);
  DirectFold s(c.size, root, 0, bytes, static_cast<char*>(op.out), op.element_size, op.fn);
  c.drive(s);
}

// The reduction of every rank's `out`, in place on every rank.
void all_reduce(const Call& c, const HostOp& op) {
  const size_t bytes = op.intent.bytes;
  auto* d = static_cast<char*>(op.out);
  if (c.hub(op.intent) >= 0) return reduce_at_hub(c, op, true);
  c.path.meet(op.intent, d, bytes, c.timeout);
  if (c.algorithm != Algorithm::Ring && bytes <= kSmall) {
    char* sum = c.scratch_of(bytes);
    AllReduceSmall s(c.rank, c.size, d, sum, bytes, op.element_size, op.fn);
    c.drive(s);
    // Peers may read our buffer until we finish; the sum goes into it after.
    s.close();
    copy_bytes(d, sum, bytes);
    return;
  }
  const Blocks blocks(bytes / op.element_size, op.element_size, c.size);
  if (c.ring(bytes)) {
    AllReduceRing s(c.size, blocks, d, op.fn);
    return c.drive(s);
  }
  AllReduceDirect s(c.size, blocks, d, op.fn);
  c.drive(s);
}

// The schedule of each kind. A barrier has none: a backend runs it as a collective of no bytes.
struct KindSchedule {
  CollectiveKind kind;
  void (*run)(const Call&, const HostOp&);
};
constexpr KindSchedule kSchedules[] = {
    {CollectiveKind::Broadcast, broadcast},
    {CollectiveKind::AllReduce, all_reduce},
    {CollectiveKind::Reduce, reduce},
    {CollectiveKind::AllGather, all_gather},
    {CollectiveKind::Gather, gather},
    {CollectiveKind::Scatter, scatter},
    {CollectiveKind::ReduceScatter, reduce_scatter},
    {CollectiveKind::AllToAll, all_to_all},
};

}  // namespace

PathCollectives::PathCollectives(std::unique_ptr<Path> path, int rank, int size, Algorithm algorithm)
    : path_(std::move(path)), rank_(rank), size_(size), algorithm_(algorithm) {}

void PathCollectives::agree(const Intent& intent, std::chrono::milliseconds timeout) {
  path_->meet(intent, nullptr, 0, timeout);
  path_->finish(timeout);
}

void PathCollectives::run(const HostOp& op, std::chrono::milliseconds timeout) {
  for (const KindSchedule& k : kSchedules)
    if (k.kind == op.intent.kind) return k.run(Call{*path_, rank_, size_, algorithm_, scratch_, timeout}, op);
  throw BackendError(std::string("no host schedule for ") + collective_name(op.intent.kind));
}

}  // namespace distrun
