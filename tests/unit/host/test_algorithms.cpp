// Each schedule of algorithms.cpp alone, over a fake path: ranks are threads of this process and
// the path moves pieces with memcpy, no shared segment, no sockets. Besides the results, the fake
// path checks what a real path relies on and cannot see by itself:
//   - every rank lists each reader's pieces alike (TCP sends what the peers say they take);
//   - a piece lies within the extent its owner exposed, and has bytes;
//   - a piece a rank takes in a phase is not written by its owner in that phase (shared memory
//     reads the peers' live buffers: a phase must see them as the previous one left them).
// Pieces are taken from a copy of each buffer made when the phase starts, so a result never
// depends on how the threads interleave.
#include <atomic>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "distrun/backend/reduce_kernels.hpp"
#include "distrun/host/algorithms.hpp"

using namespace distrun;

namespace {

using Clock = std::chrono::steady_clock;
using Listed = std::tuple<int, uint64_t, size_t>;  // a piece without its dst: peer, offset, bytes

// What the ranks of one fake group share.
struct FakeWorld {
  explicit FakeWorld(int n)
      : n(n), intents(size_t(n)), base(size_t(n)), extent(size_t(n)), snapshot(size_t(n)),
        listed(size_t(n), std::vector<std::vector<Listed>>(size_t(n))) {}

  // Every rank arrives before any leaves; a rank that never comes is an error, not a hang.
  void barrier() {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t generation = generation_;
    if (++arrived_ == n) {
      arrived_ = 0;
      ++generation_;
      cv.notify_all();
      return;
    }
    if (!cv.wait_until(lock, Clock::now() + std::chrono::seconds(20), [&] { return generation_ != generation; }))
      throw std::runtime_error("fake path: a rank did not reach the barrier within 20 s");
  }

  const int n;
  std::vector<Intent> intents;
  std::vector<const char*> base;
  std::vector<uint64_t> extent;
  std::vector<std::vector<char>> snapshot;
  std::atomic<int> spokes_taking{0};                     // phase 0s where a rank but the hub took a piece
  std::vector<std::vector<std::vector<Listed>>> listed;  // [lister][reader]
  std::mutex mu;
  std::condition_variable cv;

 private:
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

class FakePath : public Path {
 public:
  FakePath(FakeWorld& world, int rank, bool reads_peers, int hub = -1)
      : w_(world), rank_(rank), reads_peers_(reads_peers), hub_(hub) {}

  std::string name() const override { return "fake"; }
  bool reads_peers() const override { return reads_peers_; }
  int hub() const override { return hub_; }

  const std::vector<Intent>& meet(Intent intent, const void* base, uint64_t extent,
                                  std::chrono::milliseconds) override {
    if (!base) extent = 0;  // nothing exposed, whatever the size (as the real paths read it)
    intent.seq = ++seq_;
    intent.address = reinterpret_cast<uintptr_t>(base);
    intent.extent = extent;
    w_.intents[size_t(rank_)] = intent;
    w_.base[size_t(rank_)] = static_cast<const char*>(base);
    w_.extent[size_t(rank_)] = extent;
    w_.barrier();
    table_ = w_.intents;
    w_.barrier();
    std::vector<int> ranks(size_t(w_.n));
    std::iota(ranks.begin(), ranks.end(), 0);
    check_agreement(table_, true, ranks);
    return table_;
  }

  void run(Schedule& schedule, int phase, std::chrono::milliseconds) override {
    const size_t me = size_t(rank_);
    w_.snapshot[me].assign(w_.base[me], w_.base[me] + w_.extent[me]);
    for (int reader = 0; reader < w_.n; ++reader) {
      auto& list = w_.listed[me][size_t(reader)];
      list.clear();
      schedule.pieces(phase, reader, [&](const Piece& p) { list.emplace_back(p.peer, p.offset, p.bytes); });
    }
    w_.barrier();
    std::string error;
    for (int q = 0; q < w_.n && error.empty(); ++q)
      if (w_.listed[size_t(q)][me] != w_.listed[me][me])
        error = "rank " + std::to_string(q) + " lists the pieces of reader " + std::to_string(rank_) + " in phase " +
                std::to_string(phase) + " otherwise than the reader does";
    std::vector<Listed> taken;
    if (error.empty())
      schedule.pieces(phase, rank_, [&](const Piece& p) {
        if (!error.empty()) return;
        if (p.peer < 0 || p.peer >= w_.n || p.peer == rank_ || p.bytes == 0 ||
            p.offset + p.bytes > w_.extent[size_t(p.peer)]) {
          error = "phase " + std::to_string(phase) + ": rank " + std::to_string(rank_) + " takes bytes [" +
                  std::to_string(p.offset) + ", " + std::to_string(p.offset + p.bytes) + ") of rank " +
                  std::to_string(p.peer) + ", which exposed " +
                  (p.peer >= 0 && p.peer < w_.n ? std::to_string(w_.extent[size_t(p.peer)]) : std::string("nothing"));
          return;
        }
        const char* from = w_.snapshot[size_t(p.peer)].data() + p.offset;
        if (p.dst) {
          std::memcpy(p.dst, from, p.bytes);
        } else {  // in two parts, as a path that streams a piece hands it over (cut on a
                  // multiple of 64 bytes, as the real paths cut, so no element is split)
          const size_t half = p.bytes / 2 / 64 * 64;
          if (half) schedule.take(p, 0, from, half);
          schedule.take(p, half, from + half, p.bytes - half);
        }
        taken.emplace_back(p.peer, p.offset, p.bytes);
      });
    if (phase == 0 && rank_ != hub_ && !taken.empty()) ++w_.spokes_taking;
    w_.barrier();
    for (const auto& [peer, offset, bytes] : taken)
      if (error.empty() &&
          std::memcmp(w_.base[size_t(peer)] + offset, w_.snapshot[size_t(peer)].data() + offset, bytes) != 0)
        error = "phase " + std::to_string(phase) + ": rank " + std::to_string(peer) + " wrote bytes [" +
                std::to_string(offset) + ", " + std::to_string(offset + bytes) + ") of its buffer while rank " +
                std::to_string(rank_) + " took them";
    w_.barrier();
    if (!error.empty()) throw std::logic_error(error);
  }

  void finish(std::chrono::milliseconds) override { w_.barrier(); }

 private:
  FakeWorld& w_;
  int rank_;
  bool reads_peers_;
  int hub_;
  uint64_t seq_ = 0;
  std::vector<Intent> table_;
};

constexpr auto kTimeout = std::chrono::milliseconds(20000);

// Runs fn(collectives, rank) on n thread ranks over one fake group; the first failure is
// rethrown here (a rank that throws leaves the others to fail at the next barrier).
void on_ranks(int n, Algorithm algorithm, bool reads_peers, const std::function<void(PathCollectives&, int)>& fn,
              int hub = -1, FakeWorld* shared = nullptr) {
  FakeWorld own(n);
  FakeWorld& world = shared ? *shared : own;
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        PathCollectives c(std::make_unique<FakePath>(world, r, reads_peers, hub), r, n, algorithm);
        fn(c, r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  // Every failing rank's error: the first says most, the others may be the barriers it left.
  std::string all;
  for (int r = 0; r < n; ++r)
    if (!errors[size_t(r)].empty()) all += "\n  rank " + std::to_string(r) + ": " + errors[size_t(r)];
  INFO("ranks failed:" << all);
  REQUIRE(all.empty());
}

Intent intent_of(CollectiveKind kind, size_t bytes, int root = -1, bool reduces = false) {
  Intent i;
  i.kind = kind;
  i.dtype = uint32_t(DType::Int64);
  i.op = reduces ? uint32_t(ReduceOp::Sum) : 0xff;
  i.root = root;
  i.bytes = bytes;
  return i;
}

// Rank r's element i: distinct across ranks and positions, exact when summed.
int64_t value(int r, size_t i) { return int64_t(r) * 1000003 + int64_t(i); }
std::vector<int64_t> values_of(int r, size_t count, size_t from = 0) {
  std::vector<int64_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = value(r, from + i);
  return v;
}
int64_t sum_over_ranks(int n, size_t i) {
  int64_t s = 0;
  for (int r = 0; r < n; ++r) s += value(r, i);
  return s;
}

const ReduceFn kSum = reduce_kernel(DType::Int64, ReduceOp::Sum);
constexpr size_t kEs = sizeof(int64_t);

// Counts per rank: one element, an odd few, and past the 64 KiB where auto picks the ring on a
// path that does not read its peers.
const size_t kCounts[] = {1, 7, 9000};
const int kSizes[] = {1, 2, 3, 5};

struct Case {
  Algorithm algorithm;
  bool reads_peers;
  int hub;
  const char* name;
};
const Case kCases[] = {{Algorithm::Direct, false, -1, "direct"},
                       {Algorithm::Ring, false, -1, "ring"},
                       {Algorithm::Auto, false, -1, "auto, a path like TCP between two ranks"},
                       {Algorithm::Auto, false, 0, "auto, a path with a hub like TCP in larger groups"},
                       {Algorithm::Auto, true, -1, "auto, a path like shared memory"}};

void on_ranks(int n, const Case& c, const std::function<void(PathCollectives&, int)>& fn) {
  on_ranks(n, c.algorithm, c.reads_peers, fn, c.hub);
}

template <typename F>
void each_case(F&& f) {
  for (const Case& c : kCases)
    for (int n : kSizes)
      for (size_t count : kCounts) {
        INFO(c.name << ", " << n << " ranks, " << count << " elements per rank");
        f(c, n, count);
      }
}

}  // namespace

TEST_CASE("all_reduce schedules (small direct, through a hub, large direct, ring) sum every element on every rank",
          "[algorithms]") {
  each_case([](const Case& c, int n, size_t count) {
    on_ranks(n, c, [&](PathCollectives& coll, int r) {
      auto data = values_of(r, count);
      coll.run({intent_of(CollectiveKind::AllReduce, count * kEs, -1, true), nullptr, data.data(), kEs, kSum},
               kTimeout);
      for (size_t i = 0; i < count; ++i)
        if (data[i] != sum_over_ranks(n, i)) throw std::runtime_error("element " + std::to_string(i) + " wrong");
    });
  });
}

TEST_CASE("all_gather schedules (direct, through a hub, ring) put every rank's block in place", "[algorithms]") {
  each_case([](const Case& c, int n, size_t count) {
    on_ranks(n, c, [&](PathCollectives& coll, int r) {
      auto in = values_of(r, count);
      std::vector<int64_t> out(count * size_t(n), -1);
      coll.run({intent_of(CollectiveKind::AllGather, count * kEs), in.data(), out.data()}, kTimeout);
      for (int p = 0; p < n; ++p)
        if (!std::equal(out.begin() + long(p * count), out.begin() + long((p + 1) * count),
                        values_of(p, count).begin()))
          throw std::runtime_error("block of rank " + std::to_string(p) + " wrong");
    });
  });
}

TEST_CASE("through a hub: an all_gather whose n blocks pass 64 KiB goes direct, not through it", "[algorithms]") {
  // The hub would move n blocks for every peer: what counts is a rank's larger buffer.
  const int n = 4;
  for (size_t count : {(size_t(16) << 10) / kEs, (size_t(16) << 10) / kEs + 1}) {
    INFO(count * kEs << " bytes per rank");
    FakeWorld world(n);
    on_ranks(
        n, Algorithm::Auto, false,
        [&](PathCollectives& coll, int r) {
          auto in = values_of(r, count);
          std::vector<int64_t> out(count * size_t(n), -1);
          coll.run({intent_of(CollectiveKind::AllGather, count * kEs), in.data(), out.data()}, kTimeout);
          if (out.back() != value(n - 1, count - 1)) throw std::runtime_error("last block wrong");
        },
        0, &world);
    const bool through_hub = count * kEs * n <= (size_t(64) << 10);
    CHECK((world.spokes_taking == 0) == through_hub);
  }
}

TEST_CASE("reduce_scatter schedules (direct, through a hub, ring) leave each rank the sum of its block",
          "[algorithms]") {
  each_case([](const Case& c, int n, size_t count) {
    if (n == 1) return;  // the backend copies: no schedule runs
    on_ranks(n, c, [&](PathCollectives& coll, int r) {
      auto in = values_of(r, count * size_t(n));
      std::vector<int64_t> out(count, -1);
      coll.run({intent_of(CollectiveKind::ReduceScatter, count * kEs, -1, true), in.data(), out.data(), kEs, kSum},
               kTimeout);
      for (size_t i = 0; i < count; ++i)
        if (out[i] != sum_over_ranks(n, size_t(r) * count + i))
          throw std::runtime_error("element " + std::to_string(i) + " wrong");
    });
  });
}

TEST_CASE("rooted schedules (broadcast, reduce, gather, scatter), direct or through a hub, from every root",
          "[algorithms]") {
  each_case([](const Case& c, int n, size_t count) {
    for (int root = 0; root < n; ++root) {
      INFO("root " << root);
      on_ranks(n, c, [&](PathCollectives& coll, int r) {
        auto fail = [&](const std::string& what) {
          throw std::runtime_error(what + " wrong on rank " + std::to_string(r));
        };
        auto data = values_of(r, count);
        coll.run({intent_of(CollectiveKind::Broadcast, count * kEs, root), nullptr, data.data()}, kTimeout);
        if (data != values_of(root, count)) fail("broadcast");

        data = values_of(r, count);
        coll.run({intent_of(CollectiveKind::Reduce, count * kEs, root, true), nullptr, data.data(), kEs, kSum},
                 kTimeout);
        if (r == root)
          for (size_t i = 0; i < count; ++i)
            if (data[i] != sum_over_ranks(n, i)) fail("reduce");

        auto in = values_of(r, count);
        std::vector<int64_t> out(r == root ? count * size_t(n) : 0, -1);
        coll.run({intent_of(CollectiveKind::Gather, count * kEs, root), in.data(), out.data()}, kTimeout);
        if (r == root)
          for (int p = 0; p < n; ++p)
            if (!std::equal(out.begin() + long(p * count), out.begin() + long((p + 1) * count),
                            values_of(p, count).begin()))
              fail("gather");

        auto whole = r == root ? values_of(root, count * size_t(n)) : std::vector<int64_t>();
        std::vector<int64_t> mine(count, -1);
        coll.run({intent_of(CollectiveKind::Scatter, count * kEs, root), whole.data(), mine.data()}, kTimeout);
        if (mine != values_of(root, count, size_t(r) * count)) fail("scatter");
      });
    }
  });
}

TEST_CASE("all_to_all schedule with uneven and empty blocks", "[algorithms]") {
  each_case([](const Case& c, int n, size_t count) {
    // Rank r sends (r + j) % 3 * count elements to rank j: some blocks are empty.
    auto sends = [&](int from, int to) { return size_t((from + to) % 3) * count; };
    on_ranks(n, c, [&](PathCollectives& coll, int r) {
      Intent intent = intent_of(CollectiveKind::AllToAll, 0);
      size_t at = 0, total_in = 0, total_out = 0;
      for (int j = 0; j < n; ++j) {
        intent.send_offset.push_back(at);
        intent.send_bytes.push_back(sends(r, j) * kEs);
        intent.recv_bytes.push_back(sends(j, r) * kEs);
        at += sends(r, j) * kEs;
        total_in += sends(r, j);
        total_out += sends(j, r);
      }
      auto in = values_of(r, total_in);
      std::vector<int64_t> out(total_out, -1);
      coll.run({intent, in.data(), out.data()}, kTimeout);
      size_t o = 0;
      for (int p = 0; p < n; ++p) {
        size_t from = 0;  // where p's block for r starts in p's buffer
        for (int j = 0; j < r; ++j) from += sends(p, j);
        for (size_t i = 0; i < sends(p, r); ++i, ++o)
          if (out[o] != value(p, from + i)) throw std::runtime_error("block from rank " + std::to_string(p) + " wrong");
      }
    });
  });
}

TEST_CASE("a kind without a schedule (barrier) is a BackendError naming it, before it meets", "[algorithms]") {
  // A backend runs its barrier as a collective of no bytes; the table of schedules has no row
  // for it, and a kind it lacks must fail on every rank at once, not wait for its peers.
  FakeWorld world(2);
  for (int r = 0; r < 2; ++r) {
    PathCollectives c(std::make_unique<FakePath>(world, r, false), r, 2, Algorithm::Auto);
    REQUIRE_THROWS_MATCHES(c.run({intent_of(CollectiveKind::Barrier, 0)}, kTimeout), BackendError,
                           Catch::Matchers::Message("no host schedule for barrier"));
  }
}

// A one-phase schedule for the fake path's own checks: rank 1 takes `bytes` at offset 0 of rank
// 0's buffer (into rank 1's own), and rank 0, when `owner_writes`, writes its first byte during
// the phase; with `lists_differ` rank 0 lists rank 1's piece one byte shorter than rank 1 does.
struct Probe : Schedule {
  Probe(int rank, uint64_t bytes, char* own, bool owner_writes, bool lists_differ)
      : rank(rank), bytes(bytes), own(own), owner_writes(owner_writes), lists_differ(lists_differ) {}
  int phases() const override { return 1; }
  void pieces(int, int reader, const std::function<void(const Piece&)>& emit) const override {
    if (reader == 1) emit(Piece{0, 0, bytes - (lists_differ && rank == 0 ? 1 : 0), own});
    if (reader == 0 && rank == 0 && owner_writes) own[0] = 42;  // listing: rank 0 is in the phase
  }
  void take(const Piece&, size_t, const char*, size_t) override {}
  int rank;
  uint64_t bytes;
  char* own;
  bool owner_writes, lists_differ;
};

// Each rank's error when rank 0 exposes `exposed` bytes and the probe runs.
std::vector<std::string> probe_errors(uint64_t exposed, uint64_t taken, bool owner_writes, bool lists_differ) {
  FakeWorld world(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        FakePath path(world, r, false);
        std::vector<char> data(64, char(r));
        path.meet(intent_of(CollectiveKind::Broadcast, exposed, 0), r == 0 ? data.data() : nullptr,
                  r == 0 ? exposed : 0, kTimeout);
        Probe s(r, taken, data.data(), owner_writes, lists_differ);
        path.run(s, 0, kTimeout);  // both ranks reach every barrier of the phase, error or not
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

TEST_CASE("the fake path refuses what a real path could not survive", "[algorithms]") {
  // The checks above could not fail if the fake path accepted anything.
  auto fine = probe_errors(16, 16, false, false);
  CHECK(fine[0] == "");
  CHECK(fine[1] == "");
  SECTION("a piece past the owner's exposed extent") {
    auto e = probe_errors(16, 32, false, false);
    CHECK_THAT(e[1], Catch::Contains("takes bytes [0, 32) of rank 0, which exposed 16"));
  }
  SECTION("the owner writes what a peer takes in the same phase") {
    auto e = probe_errors(16, 16, true, false);
    CHECK_THAT(e[1], Catch::Contains("rank 0 wrote bytes [0, 16) of its buffer while rank 1 took them"));
  }
  SECTION("a sender lists a reader's pieces otherwise than the reader") {
    auto e = probe_errors(16, 16, false, true);
    CHECK_THAT(e[1], Catch::Contains("rank 0 lists the pieces of reader 1 in phase 0 otherwise than the reader does"));
  }
}
