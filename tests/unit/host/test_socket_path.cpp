// The socket path's intent check through its hub, against a peer that sends what no distrun
// rank would (another build, or not distrun): written here as raw messages on that peer's mesh.
#include <atomic>
#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distrun/core/error.hpp"
#include "distrun/host/path.hpp"
#include "distrun/host/paths/socket_path.hpp"
#include "distrun/store/hash_store.hpp"
#include "loopback.hpp"

using namespace distrun;
using namespace std::chrono_literals;

namespace {

constexpr int kRanks = 3;  // the smallest group that checks through the hub (rank 0)
constexpr size_t kBytes = 64;

std::vector<std::shared_ptr<SocketMesh>> meshes() {
  auto store = std::make_shared<HashStore>();
  std::vector<std::shared_ptr<SocketMesh>> mesh;
  for (int r = 0; r < kRanks; ++r)
    mesh.push_back(std::make_shared<SocketMesh>(store, r, kRanks, loopback(), std::vector<int>{}));
  return mesh;
}

// The first collective's intent, as every rank states it (a 64-byte sum of floats).
Intent first_intent() {
  Intent i;
  i.kind = CollectiveKind::AllReduce;
  i.seq = 1;
  i.dtype = uint32_t(DType::Float32);
  i.op = uint32_t(ReduceOp::Sum);
  i.bytes = kBytes;
  return i;
}

// Rank 1's row as a distrun rank writes it for the first collective, with its 64 bytes behind
// (and `flags` added to its intent's).
std::vector<char> row_of_rank_1(uint64_t flags = 0) {
  const size_t row_bytes = Intent::words(kRanks) * sizeof(uint64_t);
  std::vector<char> row(row_bytes + kBytes, 'x');
  Intent intent = first_intent();
  intent.flags |= flags;
  write_row(intent, kRanks, row.data(), row_bytes, row.data() + row_bytes, kBytes, eager_bytes(kRanks));
  return row;
}

struct Outcome {
  std::string errors[kRanks];  // ranks 0 and 2 ("" where none)
  bool answered = false;       // rank 1 got the hub's answer
};

// Ranks 0 and 2 check the first collective's intents on the socket path; rank 1 sends `row`
// as its intent and waits for the hub's answer.
Outcome check_with_rank_1_sending(const std::vector<char>& row) {
  auto mesh = meshes();
  Outcome out;
  std::vector<std::thread> ranks;
  for (int r : {0, 2})
    ranks.emplace_back([&, r] {
      try {
        SocketPath path(mesh[size_t(r)], {});
        std::vector<char> buffer(kBytes, char(r));
        path.meet(first_intent(), buffer.data(), kBytes, 10s);
        path.finish(10s);
      } catch (const Error& e) {
        out.errors[r] = e.what();
      }
    });
  const auto deadline = SocketMesh::Clock::now() + 20s;
  auto send = std::make_shared<SocketMesh::Send>();
  auto answer = std::make_shared<SocketMesh::Recv>();
  std::vector<char> rows(Intent::words(kRanks) * sizeof(uint64_t) * kRanks);
  send->key = answer->key = {SocketMesh::Kind::Intent, 1};
  send->parts = {{row.data(), row.size()}};
  answer->parts = {{rows.data(), rows.size()}};
  try {
    mesh[1]->post(0, answer, deadline);
    mesh[1]->post(0, send, deadline);
    mesh[1]->progress([&] { return send->done && answer->done; }, deadline);
    out.answered = answer->done;
  } catch (const Error&) {  // not answered
  }
  for (auto& t : ranks) t.join();
  return out;
}

void require_rank_1_refused_alike(const Outcome& o) {
  CAPTURE(o.errors[0], o.errors[2]);
  REQUIRE(o.errors[0].find("rank 1 sent an intent not of this group's form") != std::string::npos);
  REQUIRE(o.errors[2] == o.errors[0]);
  REQUIRE(o.answered);
}

}  // namespace

TEST_CASE("through the hub, a row longer than its slot is the same typed error on every rank", "[sockets]") {
  std::vector<char> row = row_of_rank_1();
  row.resize(Intent::words(kRanks) * sizeof(uint64_t) + eager_bytes(kRanks) + 8, 'x');
  require_rank_1_refused_alike(check_with_rank_1_sending(row));
}

TEST_CASE("through the hub, a row marked inline with fewer bytes than its extent is refused on every rank",
          "[sockets]") {
  std::vector<char> row = row_of_rank_1();
  row.resize(row.size() - 8);  // it states 64 bytes behind it, and carries 56
  require_rank_1_refused_alike(check_with_rank_1_sending(row));
}

TEST_CASE("through the hub, a row carrying the hub's own marks is refused on every rank", "[sockets]") {
  // Relayed as it came, a late mark would have every rank name rank 1 late (a malformed mark
  // relayed is refused alike: checked all the same).
  const uint64_t mark = GENERATE(SocketPath::kLate, SocketPath::kMalformed);
  require_rank_1_refused_alike(check_with_rank_1_sending(row_of_rank_1(mark)));
}

TEST_CASE("through the hub, a well-formed row from the same peer passes", "[sockets]") {
  const Outcome o = check_with_rank_1_sending(row_of_rank_1());
  REQUIRE(o.answered);
  REQUIRE(o.errors[0].empty());
  REQUIRE(o.errors[2].empty());
}

namespace {

// One phase in which every rank but the hub copies the hub's kBytes into `dst`.
struct FromHub : Schedule {
  char* dst;
  explicit FromHub(char* d) : dst(d) {}
  int phases() const override { return 1; }
  void pieces(int, int reader, const std::function<void(const Piece&)>& emit) const override {
    if (reader != 0) emit(Piece{0, 0, kBytes, dst});
  }
  void take(const Piece&, size_t, const char*, size_t) override {}
};

// Three collectives through the hub (checks, or with a FromHub phase where `phase`): rank 1
// gives up waiting for the hub's answer to the second before the hub starts it; the hub then
// answers it all the same (with the phase's data behind). Requires that nothing it sent is
// still kept aside on rank 1 once the third is done (read on the way to the third's answer).
void require_rank_1_keeps_nothing_of_what_it_gave_up(bool phase) {
  auto mesh = meshes();
  std::string errors[kRanks];
  std::atomic<bool> gave_up{false};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      SocketPath path(mesh[size_t(r)], {});
      std::vector<char> buffer(kBytes, char(r)), out(kBytes);
      FromHub from_hub(out.data());
      auto collective = [&](std::chrono::milliseconds timeout) {
        path.meet(first_intent(), buffer.data(), kBytes, timeout);
        if (phase) path.run(from_hub, 0, timeout);
        path.finish(timeout);
      };
      try {
        collective(10000ms);  // connects the group
        if (r == 0)
          while (!gave_up) std::this_thread::sleep_for(1ms);
        try {
          collective(r == 1 ? 100ms : 10000ms);
        } catch (const TimeoutError&) {
          if (r != 1) throw;
          gave_up = true;
        }
        collective(10000ms);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  CAPTURE(errors[0], errors[1], errors[2]);
  REQUIRE(gave_up);
  for (const std::string& e : errors) REQUIRE(e.empty());
  REQUIRE(mesh[1]->stashed() == 0);
}

}  // namespace

TEST_CASE("an answer that comes after its rank gave up is dropped, not kept aside for good", "[sockets]") {
  require_rank_1_keeps_nothing_of_what_it_gave_up(false);
}

TEST_CASE("the hub's phase data for a collective its rank gave up on is dropped, not kept aside", "[sockets]") {
  require_rank_1_keeps_nothing_of_what_it_gave_up(true);
}

TEST_CASE("a rank that comes after the hub gave up on it gets the verdict naming it, as the others do", "[sockets]") {
  auto mesh = meshes();
  std::vector<int> named[kRanks];
  std::string errors[kRanks];
  std::atomic<bool> hub_gave_up{false};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      SocketPath path(mesh[size_t(r)], {});
      std::vector<char> buffer(kBytes, char(r));
      try {
        path.meet(first_intent(), buffer.data(), kBytes, 10000ms);  // connects the group
        path.finish(10000ms);
        // Rank 2 comes to the second check only once the hub gave up on it; rank 1 would wait
        // far longer than the hub, whose verdict comes first.
        if (r == 2)
          for (int waited = 0; !hub_gave_up && waited < 10000; ++waited) std::this_thread::sleep_for(1ms);
        const auto timeout = r == 0 ? 1000ms : 3000ms;
        try {
          path.meet(first_intent(), buffer.data(), kBytes, timeout);
          path.finish(timeout);
        } catch (const TimeoutError& e) {
          named[r] = e.ranks();
        }
      } catch (const Error& e) {
        errors[r] = e.what();
      }
      if (r == 0) hub_gave_up = true;  // however it ended
    });
  for (auto& t : ranks) t.join();
  CAPTURE(errors[0], errors[1], errors[2], named[0], named[1], named[2]);
  for (const std::string& e : errors) REQUIRE(e.empty());
  for (const std::vector<int>& n : named) REQUIRE(n == std::vector<int>{2});
}

// Rank 0 of two meets once with first_intent() and finishes, in a thread; what it raises
// lands in `raised`.
std::thread meet_once(std::shared_ptr<SocketMesh> mesh, std::string& raised) {
  return std::thread([mesh = std::move(mesh), &raised] {
    try {
      SocketPath path(mesh, {});
      std::vector<char> buffer(kBytes, 0);
      path.meet(first_intent(), buffer.data(), kBytes, 10s);
      path.finish(10s);
    } catch (const Error& e) {
      raised = e.what();
    }
  });
}

TEST_CASE("between two ranks, a malformed row is refused by its receiver, which hangs up, so its sender learns at once",
          "[sockets]") {
  constexpr int kTwo = 2;  // no hub: each rank reads the other's row itself
  auto store = std::make_shared<HashStore>();
  auto mesh0 = std::make_shared<SocketMesh>(store, 0, kTwo, loopback(), std::vector<int>{});
  SocketMesh mesh1(store, 1, kTwo, loopback(), {});
  std::string refused;
  std::thread rank0 = meet_once(mesh0, refused);
  // Rank 1 sends a row longer than its slot, takes rank 0's, and waits for rank 0's data.
  const size_t slot = Intent::words(kTwo) * sizeof(uint64_t) + eager_bytes(kTwo);
  std::vector<char> row(slot + 8, 'x'), theirs(slot), data(kBytes);
  auto send = std::make_shared<SocketMesh::Send>();
  auto in = std::make_shared<SocketMesh::Recv>();
  auto phase = std::make_shared<SocketMesh::Recv>();
  send->key = in->key = {SocketMesh::Kind::Intent, 1};
  send->parts = {{row.data(), row.size()}};
  in->parts = {{theirs.data(), theirs.size()}};
  in->at_most = true;
  phase->key = {SocketMesh::Kind::Phase, 1};
  phase->parts = {{data.data(), data.size()}};
  const auto start = SocketMesh::Clock::now();
  std::string learned = "nothing";
  try {
    mesh1.post(0, in, start + 10s);
    mesh1.post(0, send, start + 10s);
    mesh1.post(0, phase, start + 10s);
    mesh1.progress([&] { return phase->done; }, start + 10s);
  } catch (const TimeoutError& e) {
    learned = std::string("timed out: ") + e.what();
  } catch (const Error& e) {
    learned = e.what();
  }
  const auto took = SocketMesh::Clock::now() - start;
  rank0.join();
  CHECK_THAT(refused, Catch::Contains("rank 1 sent an intent not of this group's form"));
  CHECK_THAT(learned, Catch::StartsWith("rank 0 ") && !Catch::Contains("timed out"));
  // It learns why, from the rank that hung up: the text rank 0 raised.
  CHECK(learned == "rank 0 hung up on this rank: " + refused);
  CHECK(took < 5s);
}

TEST_CASE("between two ranks, a marked row whose text is not behind it is refused, not read", "[sockets]") {
  // A mark's text, like an eager broadcast's payload, is read from behind the row: a row that
  // flags one without carrying it (no kInline, an extent far past its slot) is not of the
  // group's form, and its receiver refuses it instead of reading past what came.
  constexpr int kTwo = 2;
  auto store = std::make_shared<HashStore>();
  auto mesh0 = std::make_shared<SocketMesh>(store, 0, kTwo, loopback(), std::vector<int>{});
  SocketMesh mesh1(store, 1, kTwo, loopback(), {});
  std::string refused = "nothing";
  std::thread rank0 = meet_once(mesh0, refused);
  const size_t row_bytes = Intent::words(kTwo) * sizeof(uint64_t);
  std::vector<char> row(row_bytes, 0), theirs(row_bytes + eager_bytes(kTwo));
  Intent m;
  m.kind = CollectiveKind::Broadcast;
  m.seq = 1;
  m.root = 1;
  m.address = 1;
  m.extent = 300000;
  m.flags = SocketPath::kBroken;
  m.encode(reinterpret_cast<uint64_t*>(row.data()), kTwo);
  auto send = std::make_shared<SocketMesh::Send>();
  auto in = std::make_shared<SocketMesh::Recv>();
  send->key = in->key = {SocketMesh::Kind::Intent, 1};
  send->parts = {{row.data(), row.size()}};
  in->parts = {{theirs.data(), theirs.size()}};
  in->at_most = true;
  const auto start = SocketMesh::Clock::now();
  try {
    mesh1.post(0, in, start + 10s);
    mesh1.post(0, send, start + 10s);
    mesh1.progress([&] { return in->done; }, start + 10s);
  } catch (const Error&) {  // rank 0 hangs up: what rank 1 learns is the other test's matter
  }
  rank0.join();
  CHECK_THAT(refused, Catch::Contains("rank 1 sent an intent not of this group's form"));
}

TEST_CASE("a hub that only roots eager broadcasts leaves at most a row a peer unread however many it runs",
          "[sockets]") {
  // A receiver whose hub's eager row is a slice late sends the hub its own row, which a hub that
  // roots does not wait for: each of the hub's broadcasts reads and drops what came for earlier
  // ones, so its peers' rows do not pile up in its sockets (and, once those fill, in the
  // receivers' queues). The hub comes 15 ms after its receivers to each of 60 broadcasts.
  constexpr int kBroadcasts = 60;
  auto mesh = meshes();
  std::string errors[kRanks];
  std::atomic<int> finished{0};
  size_t unread[kRanks] = {};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      try {
        SocketPath path(mesh[size_t(r)], {});
        Intent b;
        b.kind = CollectiveKind::Broadcast;
        b.dtype = uint32_t(DType::Float32);
        b.bytes = 32;
        b.root = 0;
        std::vector<char> buffer(32, char(r));
        for (int i = 0; i < kBroadcasts; ++i) {
          if (r == 0) std::this_thread::sleep_for(15ms);
          if (!path.broadcast_eager(b, buffer.data(), 10000ms)) throw std::runtime_error("not eager");
          if (buffer[31] != 0) throw std::runtime_error("broadcast " + std::to_string(i) + " wrong");
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      ++finished;
      // Connected until the hub has looked at what is left unread.
      for (int waited = 0; finished < kRanks + 1 && waited < 10000; ++waited) {
        if (r == 0 && finished == kRanks) {
          std::this_thread::sleep_for(50ms);  // the last rows told are in
          for (int p = 1; p < kRanks; ++p) unread[p] = mesh[0]->unread(p);
          ++finished;
        }
        std::this_thread::sleep_for(1ms);
      }
    });
  for (auto& t : ranks) t.join();
  for (const std::string& e : errors) REQUIRE(e.empty());
  // A receiver's row: its intent's words and the message's header; two allowed.
  const size_t row = Intent::words(kRanks) * sizeof(uint64_t) + 3 * sizeof(uint64_t);
  for (int p = 1; p < kRanks; ++p) {
    CAPTURE(p, unread[p], row);
    CHECK(unread[p] <= 2 * row);
  }
}
