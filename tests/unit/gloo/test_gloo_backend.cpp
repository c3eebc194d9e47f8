// GlooBackend trusts no peer: ranks that disagree on a collective or a send/recv get the same
// typed error on every rank, on both paths, and the pair keeps working.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "distrun/backend/intent.hpp"
#include "distrun/gloo/gloo_backend.hpp"
#include "distrun/host/paths/shm_path.hpp"
#include "distrun/store/hash_store.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// The sanitizers' allocator answers this (GCC ships no header that declares it).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#else
#include <malloc.h>
#endif

using namespace distrun;

namespace {

// Bytes the program holds on its heap: where a message kept aside for a receive would show.
int64_t heap_in_use() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return int64_t(__sanitizer_get_current_allocated_bytes());  // the sanitizer's own allocator
#else
  const struct mallinfo2 m = mallinfo2();
  return int64_t(m.uordblks + m.hblkhd);
#endif
}

Tensor full(int64_t n, double v, DType dt) {
  Tensor t = Tensor::zeros({n}, dt);
  for (int64_t e = 0; e < n; ++e) t.set(e, v);
  return t;
}

// Appends what `f` did to `seen`: "ok", or the text of the mismatch it raised.
void record(std::vector<std::string>& seen, const std::function<void()>& f) {
  try {
    f();
    seen.push_back("ok");
  } catch (const CollectiveMismatchError& e) {
    seen.push_back(e.what());
  }
}

// Waits for `work`, which must fail for the loss of its peer within 10 s, not time out or
// succeed: throws saying how `what` did otherwise.
void expect_lost(Work& work, std::chrono::milliseconds timeout, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  try {
    work.wait(timeout);
  } catch (const TimeoutError&) {
    throw std::runtime_error(what + " waited out its timeout");
  } catch (const Error&) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10))
      throw std::runtime_error(what + " raised only after 10 s");
    return;
  }
  throw std::runtime_error(what + " raised nothing");
}

// Runs fn(backend) on `n` thread ranks over `transport`; returns each rank's error ("" when
// it returned normally).
std::vector<std::string> on_ranks(int n, PathPreference transport, const std::function<void(GlooBackend&)>& fn) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        GlooBackendOptions o;
        o.read_env();  // DISTRUN_SHM_INLINE_BYTES of the single-copy variant
        o.timeout = std::chrono::seconds(20);
        o.transport = transport;
        GlooBackend b(store, r, n, o);
        const std::string want = transport == PathPreference::Tcp ? "tcp" : "shm";
        if (b.transport_name() != want) throw std::runtime_error("path is " + b.transport_name() + ", not " + want);
        fn(b);
      } catch (const CollectiveMismatchError& e) {
        errors[size_t(r)] = std::string("mismatch: ") + e.what();
      } catch (const std::exception& e) {
        errors[size_t(r)] = std::string("other: ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// Runs a call, counting it when it raises CollectiveMismatchError.
struct MismatchCounter {
  int count = 0;
  void operator()(const std::function<void()>& f) {
    try {
      f();
    } catch (const CollectiveMismatchError&) {
      ++count;
    }
  }
};

const PathPreference kPaths[] = {PathPreference::SharedMemory, PathPreference::Tcp};
const char* path_name(PathPreference t) { return t == PathPreference::Tcp ? "tcp" : "shm"; }

}  // namespace

TEST_CASE("a peer passing fewer bytes to all_gather is a typed error on every rank, not a read of its heap",
          "[trust]") {
  for (auto path : kPaths) {
    INFO("path " << path_name(path));
    std::vector<float> out0(2048, -1.0f);
    auto errors = on_ranks(2, path, [&](GlooBackend& b) {
      // Rank 0 expects 1024 floats from each rank; rank 1 passes 4.
      const int64_t mine = b.rank() == 0 ? 1024 : 4;
      Tensor in = full(mine, 1.0, DType::Float32);
      Tensor out = Tensor::zeros({mine * 2}, DType::Float32);
      try {
        b.all_gather(in, out, {});
      } catch (...) {
        if (b.rank() == 0) std::memcpy(out0.data(), out.data(), out.nbytes());
        throw;
      }
    });
    for (auto& e : errors) {
      CHECK_THAT(e, Catch::StartsWith("mismatch: all_gather #1: the ranks disagree on the bytes per rank"));
      CHECK_THAT(e, Catch::Contains("rank 0 has 4096 bytes, rank 1 has 16 bytes"));
    }
    // Nothing of the peer landed in rank 0's output.
    CHECK(out0[1024] == 0.0f);
  }
}

TEST_CASE("a rank whose buffer of n blocks is the wrong size: the same typed error on every rank", "[trust]") {
  for (auto path : kPaths) {
    INFO("path " << path_name(path));
    auto errors = on_ranks(2, path, [&](GlooBackend& b) {
      // Rank 1's buffer of blocks holds 3 floats instead of 2 blocks of 4.
      const int64_t whole = b.rank() == 1 ? 3 : 8;
      std::vector<std::string> seen;
      auto expect = [&](const std::function<void()>& f) {
        try {
          f();
        } catch (const CollectiveMismatchError& e) {
          seen.push_back(e.what());
        }
      };
      Tensor block = full(4, 1.0, DType::Float32), blocks = full(whole, 1.0, DType::Float32);
      expect([&] { b.all_gather(block, blocks, {}); });
      expect([&] { b.reduce_scatter(blocks, block, {}); });
      GatherOptions go;
      go.root = 1;
      expect([&] { b.gather(block, blocks, go); });
      ScatterOptions so;
      so.root = 1;
      expect([&] { b.scatter(blocks, block, so); });
      b.all_reduce(block, {});  // the group still works
      const std::vector<std::string> want = {"all_gather #1: rank 1's output holds 12 bytes, not 2 blocks of 16",
                                             "reduce_scatter #2: rank 1's input holds 12 bytes, not 2 blocks of 16",
                                             "gather #3: rank 1's output holds 12 bytes, not 2 blocks of 16",
                                             "scatter #4: rank 1's input holds 12 bytes, not 2 blocks of 16"};
      if (seen != want || block.get(0) != 2.0) {
        std::string got;
        for (auto& e : seen) got += "\n  " + e;
        throw std::runtime_error("rank " + std::to_string(b.rank()) + " saw:" + got);
      }
    });
    for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == "");
  }
}

TEST_CASE(
    "disagreeing on the collective, dtype, op, root or all_to_all counts: same typed error everywhere, "
    "and the group still works after it",
    "[trust]") {
  for (auto path : kPaths) {
    INFO("path " << path_name(path));
    auto errors = on_ranks(3, path, [&](GlooBackend& b) {
      const int r = b.rank();
      MismatchCounter expect_mismatch;
      // Broadcasts above the eager broadcast's 512 B: every rank meets (an eager one that
      // disagrees breaks the group on shared memory: "an eager broadcast ..." below).
      Tensor f = full(2048, 1.0, DType::Float32), i = full(2048, 1.0, DType::Int32);
      // Which collective runs.
      expect_mismatch([&] { r == 2 ? b.broadcast(f, {}) : b.all_reduce(f, {}); });
      // The dtype.
      expect_mismatch([&] { b.all_reduce(r == 1 ? i : f, {}); });
      // The reduction.
      AllreduceOptions mx;
      mx.op = r == 0 ? ReduceOp::Max : ReduceOp::Sum;
      expect_mismatch([&] { b.all_reduce(f, mx); });
      // The root.
      BroadcastOptions bo;
      bo.root = r == 2 ? 1 : 0;
      expect_mismatch([&] { b.broadcast(f, bo); });
      // all_to_all counts: rank 0 sends 2 to rank 1, which expects 1 from it.
      AllToAllOptions ao;
      ao.send_counts = {1, r == 0 ? 2 : 1, 1};
      ao.recv_counts = {1, 1, 1};
      Tensor ai = Tensor::zeros({r == 0 ? 4 : 3}, DType::Float32), aout = Tensor::zeros({3}, DType::Float32);
      expect_mismatch([&] { b.all_to_all(ai, aout, ao); });
      if (expect_mismatch.count != 5)
        throw std::runtime_error("only " + std::to_string(expect_mismatch.count) + " of 5 mismatches raised");
      // Every rank stopped at the same collectives, so the next one still meets.
      Tensor ok = full(5, double(r + 1), DType::Float32);
      b.all_reduce(ok, {});
      if (ok.get(4) != 6.0)
        throw std::runtime_error("all_reduce after the mismatches gave " + std::to_string(ok.get(4)));
    });
    for (int r = 0; r < 3; ++r) CHECK(errors[size_t(r)] == "");
  }
}

TEST_CASE(
    "disagreeing on collectives past the socket buffers: the same typed error on both ranks, the bytes sent ahead of "
    "the check dropped unread, and the pair still works",
    "[trust]") {
  // On the sockets a first phase goes out before the peers' intents are in: 4 MiB each way
  // that nobody reads fill both sockets, so each rank keeps unsent bytes when the check fails.
  auto errors = on_ranks(2, PathPreference::Tcp, [&](GlooBackend& b) {
    const int r = b.rank();
    const int64_t n = int64_t(1) << 20;
    MismatchCounter expect_mismatch;
    Tensor f = full(n, 1.0, DType::Float32), i = full(n, 1.0, DType::Int32);
    expect_mismatch([&] { b.all_reduce(r == 1 ? i : f, {}); });
    BroadcastOptions bo;
    bo.root = r;  // both send their whole buffer
    expect_mismatch([&] { b.broadcast(f, bo); });
    Tensor out = full(n, -1.0, DType::Float32);
    expect_mismatch([&] { b.reduce_scatter(full(r == 0 ? 2 * n : n, 1.0, DType::Float32), out, {}); });
    if (expect_mismatch.count != 3)
      throw std::runtime_error("only " + std::to_string(expect_mismatch.count) + " of 3 mismatches raised");
    if (out.get(0) != -1.0) throw std::runtime_error("a failed reduce_scatter wrote its output");
    Tensor big = full(n, double(r + 1), DType::Float32), small = full(4, double(r + 1), DType::Float32);
    b.all_reduce(big, {});
    b.all_reduce(small, {});
    if (big.get(n - 1) != 3.0 || small.get(3) != 3.0)
      throw std::runtime_error("all_reduce after the mismatches gave " + std::to_string(big.get(n - 1)) + " and " +
                               std::to_string(small.get(3)));
  });
  for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == "");
}

TEST_CASE(
    "bytes sent ahead of a check that fails are dropped by their readers, not kept, and the next collectives are "
    "right on every rank",
    "[trust]") {
  // On the sockets a first phase goes out right behind its intent. When the check fails, those
  // bytes still reach their readers (the stream keeps its framing), which must drop them unread:
  // neither take them for the next collective's data, nor keep them aside for a receive that
  // never comes. Two ranks: all_reduce's first phase sends a block to the peer; a broadcast
  // that both ranks root sends each buffer to the other (4 MiB per rank a round). Three ranks
  // check through a hub, where nothing but the rows goes ahead of the check: the same rounds
  // leave nothing behind there either.
  const int64_t n = int64_t(1) << 20;  // 4 MiB of float: past the small collectives
  const int rounds = 4;
  for (int ranks : {2, 3}) {
    INFO(ranks << " ranks");
    std::atomic<int64_t> heap_first{0}, heap_last{0};
    auto errors = on_ranks(ranks, PathPreference::Tcp, [&](GlooBackend& b) {
      const int r = b.rank();
      MismatchCounter expect_mismatch;
      // Rank p's element e; the bytes sent ahead hold 1000 + rank, far from any of these or their sums.
      auto fill = [&](Tensor& t, int p) {
        float* d = t.data_as<float>();
        for (int64_t e = 0; e < n; ++e) d[e] = float(p + 1 + e % 5);
      };
      auto expect = [&](const Tensor& t, const char* what, const std::function<float(int64_t)>& want) {
        const float* d = t.data_as<float>();
        for (int64_t e = 0; e < n; ++e)
          if (d[e] != want(e))
            throw std::runtime_error(std::string(what) + " after a mismatch: element " + std::to_string(e) + " is " +
                                     std::to_string(d[e]) + ", not " + std::to_string(want(e)));
      };
      for (int round = 0; round <= rounds; ++round) {
        Tensor ahead = full(n, 1000.0 + r, r == ranks - 1 ? DType::Int32 : DType::Float32);
        expect_mismatch([&] { b.all_reduce(ahead, {}); });
        Tensor sum = Tensor::zeros({n}, DType::Float32);
        fill(sum, r);
        b.all_reduce(sum, {});
        expect(sum, "all_reduce", [&](int64_t e) { return float(ranks * (ranks + 1) / 2 + ranks * (e % 5)); });

        BroadcastOptions bo;
        bo.root = r;
        ahead = full(n, 1000.0 + r, DType::Float32);
        expect_mismatch([&] { b.broadcast(ahead, bo); });
        bo.root = 1;
        Tensor copy = full(n, -1.0, DType::Float32);
        if (r == 1) fill(copy, 1);
        b.broadcast(copy, bo);
        expect(copy, "broadcast", [](int64_t e) { return float(2 + e % 5); });

        // Every connection has carried a message since the bytes sent ahead (the barrier's
        // intents), so every reader has met them; rank 0 weighs the heap while the others wait.
        b.barrier({});
        if (r == 0) (round == 0 ? heap_first : heap_last) = heap_in_use();
        b.barrier({});
      }
      if (expect_mismatch.count != 2 * (rounds + 1))
        throw std::runtime_error(std::to_string(expect_mismatch.count) + " of " + std::to_string(2 * (rounds + 1)) +
                                 " mismatches raised");
    });
    for (int r = 0; r < ranks; ++r) CHECK(errors[size_t(r)] == "");
    // Kept aside, each round's bytes sent ahead would stay: at two ranks about 12 MiB a round,
    // 48 MiB over the last four.
    INFO("heap after the first round " << heap_first << " bytes, after the last " << heap_last);
    CHECK(heap_last - heap_first < (int64_t(16) << 20));
  }
}

// Over distrun's sockets (the TCP path) a send waits for no answer: the sender raises a
// mismatch at its next call with that peer once the receiver's refusal is in, which comes ahead
// of anything the receiver sends it later (socket_p2p.hpp). So there the sender receives a
// token the receiver sends after its receive, then sends it back, a send that raises the
// refusal instead when there is one (the receiver, which knows whether it refused, receives it
// only when it did not). Over Gloo's pairs (shared memory's point-to-point) the send itself
// raises it.
bool sockets(GlooBackend& b) { return b.transport_name() == "tcp"; }

TEST_CASE("send/recv that disagree on size or dtype: the same typed error on both ranks and the pair still works",
          "[trust]") {
  for (auto path : kPaths) {
    INFO("path " << path_name(path));
    auto errors = on_ranks(2, path, [&](GlooBackend& b) {
      const bool sender = b.rank() == 0;
      std::vector<std::string> seen;
      auto exchange = [&](int64_t sent, DType sent_type, int64_t expected, DType expected_type) {
        bool refused = false;
        try {
          if (sender) {
            b.send(full(sent, 3.0, sent_type), 1, {});
          } else {
            Tensor t = full(expected, -1.0, expected_type);
            b.recv(t, 0, {});
            if (t.get(expected - 1) != 3.0) throw std::runtime_error("received " + std::to_string(t.get(expected - 1)));
          }
        } catch (const CollectiveMismatchError& e) {
          if (sender && sockets(b)) throw std::runtime_error("a send over the sockets waited for its receiver");
          seen.push_back(e.what());
          refused = true;
        }
        if (!sockets(b)) return;
        Tensor token = full(1, 0.0, DType::Int32);
        if (!sender) {
          b.send(token, 0, {});
          if (!refused) b.recv(token, 0, {});
          return;
        }
        b.recv(token, 1, {});
        try {
          b.send(token, 1, {});
        } catch (const CollectiveMismatchError& e) {
          seen.push_back(e.what());
        }
      };
      exchange(16, DType::Float32, 4, DType::Float32);  // longer than the receive: was an abort in Gloo
      exchange(4, DType::Float32, 16, DType::Float32);  // shorter: was a silently short receive
      exchange(4, DType::Int32, 4, DType::Float32);     // same bytes, another dtype
      exchange(8, DType::Float64, 8, DType::Float64);   // agreeing: still delivered afterwards
      const std::vector<std::string> want =
          {"send/recv from rank 0 to rank 1 (tag 0): rank 0 sends 64 bytes of float32, rank 1 expects 16 bytes of "
           "float32",
           "send/recv from rank 0 to rank 1 (tag 0): rank 0 sends 16 bytes of float32, rank 1 expects 64 bytes of "
           "float32",
           "send/recv from rank 0 to rank 1 (tag 0): rank 0 sends 16 bytes of int32, rank 1 expects 16 bytes of "
           "float32"};
      if (seen != want) {
        std::string got;
        for (auto& s : seen) got += "\n  " + s;
        throw std::runtime_error("rank " + std::to_string(b.rank()) + " saw:" + got);
      }
    });
    for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == "");
  }
}

TEST_CASE("send/recv: every size beside the receive's is a typed error, never an abort in Gloo", "[trust]") {
  // The payload moves in parts of the sizes of its set bits: no part can meet a receive of
  // another length, whatever the two sizes (a hash of them would collide for some pairs).
  for (auto path : kPaths) {
    INFO("path " << path_name(path));
    auto errors = on_ranks(2, path, [&](GlooBackend& b) {
      int mismatches = 0;
      for (int64_t sent = 0; sent <= 400; ++sent) {
        // Over the sockets a send that raises an earlier refusal sent nothing: sent again.
        for (bool moved = false; !moved;) {
          try {
            if (b.rank() == 0) {
              b.send(full(sent, 5.0, DType::UInt8), 1, {});
            } else {
              Tensor t = full(16, 0.0, DType::UInt8);
              b.recv(t, 0, {});
            }
            moved = true;
          } catch (const CollectiveMismatchError&) {
            ++mismatches;
            moved = b.rank() == 1 || !sockets(b);
          }
        }
      }
      // And the pair still delivers: 396 bytes where 396 are expected (over the sockets, once
      // the sender has raised each refusal, one a call, after the receiver's token).
      Tensor t = full(396, b.rank() == 0 ? 7.0 : 0.0, DType::UInt8);
      if (b.rank() == 0) {
        if (sockets(b)) {
          Tensor token = full(1, 0.0, DType::UInt8);
          b.recv(token, 1, {});
        }
        for (bool sent = false; !sent;) {
          try {
            b.send(t, 1, {});
            sent = true;
          } catch (const CollectiveMismatchError&) {
            ++mismatches;
          }
        }
      } else {
        if (sockets(b)) b.send(full(1, 0.0, DType::UInt8), 0, {});
        b.recv(t, 0, {});
      }
      if (mismatches != 400) throw std::runtime_error(std::to_string(mismatches) + " mismatches, not 400");
      if (t.get(0) != 7.0 || t.get(395) != 7.0) throw std::runtime_error("the agreeing message did not arrive");
    });
    for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == "");
  }
}

TEST_CASE("over the sockets a send is done once written: its receiver posts the receive only after it returned",
          "[trust][sockets]") {
  // Were a send to wait for an answer of its receiver's, the sender would time out here.
  std::promise<void> sent;
  auto errors = on_ranks(2, PathPreference::Tcp, [&](GlooBackend& b) {
    SendOptions o;
    o.timeout = std::chrono::seconds(2);
    Tensor t = full(1000, b.rank() == 0 ? 4.0 : 0.0, DType::Float32);
    if (b.rank() == 0) {
      struct Signal {
        std::promise<void>& p;
        ~Signal() { p.set_value(); }  // also when the send throws: rank 1 must not hang
      } signal{sent};
      for (int round = 0; round < 3; ++round) b.send(t, 1, o);
      return;
    }
    sent.get_future().wait();
    for (int round = 0; round < 3; ++round) {
      b.recv(t, 0, o);
      if (t.get(0) != 4.0 || t.get(999) != 4.0) throw std::runtime_error("the message did not arrive");
    }
  });
  for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == "");
}

TEST_CASE("over the sockets a sender that leaves right after a large send: its receiver still gets every byte",
          "[trust][sockets]") {
  // The send is done once written, most of it still in the kernel when the sender's group goes:
  // the group closes its connection only once its peer has taken it.
  const int64_t n = int64_t(1) << 20;
  auto errors = on_ranks(2, PathPreference::Tcp, [&](GlooBackend& b) {
    if (b.rank() == 0) {
      Tensor t = full(n, 0.0, DType::UInt8);
      for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(t.data())[i] = uint8_t(i * 7);
      b.send(t, 1, {});
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 has left by now
    Tensor t = full(n, 0.0, DType::UInt8);
    b.recv(t, 0, {});
    for (int64_t i = 0; i < n; ++i)
      if (static_cast<uint8_t*>(t.data())[i] != uint8_t(i * 7)) throw std::runtime_error("byte " + std::to_string(i));
  });
  for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == "");
}

TEST_CASE("over the sockets a refusal to a sender that left fails no later operation with another rank",
          "[trust][sockets]") {
  // Rank 1 refuses rank 0's message after rank 0 has left: the refusal cannot be written, and
  // rank 1's receive from rank 2 must neither stall on it nor fail naming rank 0.
  auto errors = on_ranks(3, PathPreference::Tcp, [&](GlooBackend& b) {
    Tensor token = full(1, 5.0, DType::Int32);
    if (b.rank() == 0) {
      b.send(full(4, 3.0, DType::Float32), 1, {});
      return;
    }
    if (b.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      b.send(token, 1, {});
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Tensor t = full(8, 0.0, DType::Float32);
    MismatchCounter refused;
    refused([&] { b.recv(t, 0, {}); });
    if (refused.count != 1) throw std::runtime_error("rank 0's message of another size was taken");
    Tensor got = full(1, 0.0, DType::Int32);
    b.recv(got, 2, {});
    if (got.get(0) != 5.0) throw std::runtime_error("the token from rank 2 is wrong");
  });
  for (int r = 0; r < 3; ++r) CHECK(errors[size_t(r)] == "");
}

TEST_CASE("over the sockets a receiver that refuses a message of a sender that left still takes its next one",
          "[trust][sockets]") {
  // Rank 0 sends two messages and leaves before rank 1 accepts its connection: the refusal of
  // the first meets a closed socket, and the second, already in rank 1's, must still arrive.
  const int64_t n = int64_t(16) << 10;
  auto errors = on_ranks(2, PathPreference::Tcp, [&](GlooBackend& b) {
    if (b.rank() == 0) {
      b.send(full(4, 3.0, DType::Float32), 1, {});
      b.send(full(n, 1.0, DType::UInt8), 1, {});
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    Tensor t = full(8, 0.0, DType::Float32);
    MismatchCounter refused;
    refused([&] { b.recv(t, 0, {}); });
    if (refused.count != 1) throw std::runtime_error("rank 0's message of another size was taken");
    Tensor y = full(n, 0.0, DType::UInt8);
    b.recv(y, 0, {});
    if (y.get(0) != 1.0 || y.get(n - 1) != 1.0) throw std::runtime_error("the second message is wrong");
  });
  for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == "");
}

TEST_CASE(
    "a ConfigError on each member when their DISTRUN_ALGO, DISTRUN_TRANSPORT, DISTRUN_HIERARCHY, "
    "DISTRUN_TCP or DISTRUN_SHM_INLINE_BYTES differ",
    "[trust]") {
  for (int which = 0; which < 5; ++which) {
    auto store = std::make_shared<HashStore>();
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        GlooBackendOptions o;
        o.timeout = std::chrono::seconds(20);
        o.transport = PathPreference::Tcp;
        if (r == 1 && which == 0) o.algorithm = Algorithm::Ring;
        if (r == 1 && which == 1) o.transport = PathPreference::Auto;
        if (r == 1 && which == 2) o.hierarchy = Hierarchy::Flat;
        if (r == 1 && which == 3) o.shm_inline_bytes = 0;
        if (r == 1 && which == 4) o.tcp = "gloo";
        try {
          GlooBackend b(store, r, 2, o);
        } catch (const ConfigError& e) {
          errors[size_t(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    const char* rank1[] =
        {"DISTRUN_TRANSPORT=tcp DISTRUN_ALGO=ring DISTRUN_HIERARCHY=auto DISTRUN_TCP=socket "
         "DISTRUN_SHM_INLINE_BYTES=65536",
         "DISTRUN_TRANSPORT=auto DISTRUN_ALGO=auto DISTRUN_HIERARCHY=auto DISTRUN_TCP=socket "
         "DISTRUN_SHM_INLINE_BYTES=65536",
         "DISTRUN_TRANSPORT=tcp DISTRUN_ALGO=auto DISTRUN_HIERARCHY=flat DISTRUN_TCP=socket "
         "DISTRUN_SHM_INLINE_BYTES=65536",
         "DISTRUN_TRANSPORT=tcp DISTRUN_ALGO=auto DISTRUN_HIERARCHY=auto DISTRUN_TCP=socket DISTRUN_SHM_INLINE_BYTES=0",
         "DISTRUN_TRANSPORT=tcp DISTRUN_ALGO=auto DISTRUN_HIERARCHY=auto DISTRUN_TCP=gloo "
         "DISTRUN_SHM_INLINE_BYTES=65536"};
    const std::string want =
        std::string(
            "the members of a group must share DISTRUN_TRANSPORT, DISTRUN_ALGO, "
            "DISTRUN_HIERARCHY, DISTRUN_TCP and DISTRUN_SHM_INLINE_BYTES: rank 0 has DISTRUN_TRANSPORT=tcp "
            "DISTRUN_ALGO=auto DISTRUN_HIERARCHY=auto DISTRUN_TCP=socket DISTRUN_SHM_INLINE_BYTES=65536, rank 1 has ") +
        rank1[which];
    for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == want);
  }
}

TEST_CASE("DISTRUN_SHM_INLINE_BYTES: a number of bytes up to the slot's 64 KiB, else a ConfigError", "[trust]") {
  // This binary also runs with the variable set (the single-copy variant): left as found.
  const char* found = std::getenv("DISTRUN_SHM_INLINE_BYTES");
  const std::string before = found ? found : "";
  for (const char* bad : {"65537", "-1", "64K", "1e3", "99999999999999999999"}) {
    INFO(bad);
    setenv("DISTRUN_SHM_INLINE_BYTES", bad, 1);
    GlooBackendOptions o;
    CHECK_THROWS_AS(o.read_env(), ConfigError);
  }
  setenv("DISTRUN_SHM_INLINE_BYTES", "4096", 1);
  GlooBackendOptions o;
  o.read_env();
  CHECK(o.shm_inline_bytes == 4096);
  if (found)
    setenv("DISTRUN_SHM_INLINE_BYTES", before.c_str(), 1);
  else
    unsetenv("DISTRUN_SHM_INLINE_BYTES");
}

TEST_CASE("an exchange (isend; blocking recv; wait on both ranks) meets: the payload moves before the sender's wait",
          "[trust]") {
  // Ring and pipeline code posts its send, receives the peer's block, then waits on the send.
  // Were a payload held back until its sender's wait(), both ranks would sit in recv.
  for (auto path : kPaths) {
    INFO("path " << path_name(path));
    auto errors = on_ranks(2, path, [&](GlooBackend& b) {
      const int peer = 1 - b.rank();
      for (int round = 0; round < 3; ++round) {
        auto work = b.isend(full(1000, 10.0 * b.rank() + round, DType::Float32), peer, {});
        Tensor got = full(1000, -1.0, DType::Float32);
        b.recv(got, peer, {});
        work->wait();
        const double want = 10.0 * peer + round;
        if (got.get(0) != want || got.get(999) != want)
          throw std::runtime_error("round " + std::to_string(round) + ": got " + std::to_string(got.get(999)));
      }
    });
    for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == "");
  }
}

TEST_CASE("messages of different sizes each way between two ranks: each meets its own receive", "[trust]") {
  // The n-th message from rank 0 to 1 is 1 element, the n-th from 1 to 0 is 1000: what each
  // side states of one must never be taken for the other's.
  for (auto path : kPaths) {
    INFO("path " << path_name(path));
    auto errors = on_ranks(2, path, [&](GlooBackend& b) {
      const int peer = 1 - b.rank();
      const int64_t mine = b.rank() == 0 ? 1 : 1000, theirs = b.rank() == 0 ? 1000 : 1;
      for (int round = 0; round < 3; ++round) {
        Tensor got = full(theirs, -1.0, DType::Float32);
        auto r = b.irecv(got, peer, {});
        auto s = b.isend(full(mine, 10.0 * b.rank() + round, DType::Float32), peer, {});
        r->wait();
        s->wait();
        const double want = 10.0 * peer + round;
        if (got.get(0) != want || got.get(theirs - 1) != want)
          throw std::runtime_error("round " + std::to_string(round) + ": got " + std::to_string(got.get(0)));
      }
    });
    for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == "");
  }
}

TEST_CASE("an eager broadcast that a receiver disagrees with: its error there, the root's at its next collective",
          "[eager]") {
  // A broadcast of at most 512 B on shared memory, and over the sockets between two ranks, does
  // not meet: the root posts (or sends) and returns. Each case runs a broadcast both ranks see
  // differently (3, 4: one of them meets), then an all_reduce, then another.
  for (auto path : kPaths)
    for (int which = 0; which < 5; ++which) {
      INFO("path " << path_name(path) << ", case " << which);
      std::vector<std::vector<std::string>> seen(2);
      auto errors = on_ranks(2, path, [&](GlooBackend& b) {
        const int r = b.rank();
        auto call = [&](const std::function<void()>& f) { record(seen[size_t(r)], f); };
        BroadcastOptions bo;
        if (which == 2) bo.root = r;  // both claim the root
        Tensor t = full(which == 0 && r == 1   ? 4
                        : which == 4 && r == 0 ? 2048
                                               : 8,
                        1.0, which == 1 && r == 1 ? DType::Int32 : DType::Float32);
        call([&] { which == 3 && r == 1 ? b.all_reduce(t, {}) : b.broadcast(t, bo); });
        Tensor ok = full(5, 1.0, DType::Float32);
        call([&] { b.all_reduce(ok, {}); });
        call([&] { b.all_reduce(ok, {}); });
      });
      for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == "");
      const std::vector<std::string> first =
          {"broadcast #1: the ranks disagree on the bytes per rank: rank 1 has 16 "
           "bytes, rank 0 has 32 bytes",
           "broadcast #1: the ranks disagree on the dtype: rank 1 has int32, rank 0 "
           "has float32"};
      if (which < 2) {
        // The receiver at the broadcast; the root, which returned, at its next collective.
        CHECK(seen[1][0] == first[size_t(which)]);
        CHECK(seen[0][0] == "ok");
        for (int r = 0; r < 2; ++r)
          for (size_t c = 1; c < 3; ++c)
            CHECK(seen[size_t(r)][c] == "collective #" + std::to_string(c + 1) +
                                            ": rank 1 found a disagreement on an eager broadcast at collective #1 (" +
                                            first[size_t(which)] + "); every later collective of the group fails");
      } else if (which > 2) {
        // The rank that meets sees the eager entry; the root of an eager broadcast learns later.
        // In 4 both see it at once, each by its own check or by the other's mark if that came first.
        if (which == 3) {
          CHECK(seen[0][0] == "ok");
          CHECK_THAT(seen[1][0], Catch::StartsWith("broadcast #1: the ranks disagree on which collective runs"));
        } else {
          for (int r = 0; r < 2; ++r)
            CHECK_THAT(seen[size_t(r)][0], Catch::Contains("broadcast #1: the ranks disagree on the bytes per rank"));
        }
        for (int r = 0; r < 2; ++r) CHECK_THAT(seen[size_t(r)][2], Catch::StartsWith("collective #3: rank "));
      } else if (path == PathPreference::Tcp) {
        // Neither root reads at the broadcast; each sees the other's count of rooted broadcasts in
        // its row at the next collective, and carries the mark from then on.
        for (int r = 0; r < 2; ++r) {
          CHECK(seen[size_t(r)][0] == "ok");
          CHECK(seen[size_t(r)][1] == "all_reduce #2: rank " + std::to_string(1 - r) +
                                          " rooted 1 eager broadcasts, of which rank " + std::to_string(r) +
                                          " received 0: the ranks disagreed on the root of one");
          CHECK_THAT(seen[size_t(r)][2], Catch::StartsWith("collective #3: rank " + std::to_string(r) + " found"));
        }
      } else {
        // At least one root sees the other's entry at once; both fail from the next collective.
        int at_once = 0;
        for (int r = 0; r < 2; ++r) {
          if (seen[size_t(r)][0] != "ok") {
            ++at_once;
            CHECK_THAT(seen[size_t(r)][0], Catch::StartsWith("broadcast #1: the ranks disagree on the root"));
          }
          CHECK_THAT(seen[size_t(r)][1], Catch::StartsWith("collective #2: rank "));
          CHECK_THAT(seen[size_t(r)][2], Catch::StartsWith("collective #3: rank "));
        }
        CHECK(at_once >= 1);
      }
    }
  // Over the sockets in groups of 3 and 4 (through the hub, rank 0): the rank that sees the
  // disagreement raises at that call and sends its marked row to every peer; a rank still
  // waiting may read it first and raise the mark at that call too, and every rank raises at
  // the next collective (a meeting, whose hub reads every rank's row). Cases: 0, 1 a receiver's
  // bytes or dtype against the hub's eager row; 2 every rank claims the root (no rank reads,
  // the hub finds the digests apart at the next meeting); 3 the last rank meets against the
  // hub's eager broadcast; 4 root 1 meets (2048 elements) where the others are eager; 5 the hub
  // meets against rank 1's eager broadcast; 6 the last rank meets while the hub receives rank
  // 1's (the hub, which reads every rank's row, finds it); 7 the hub and root 1 meet while the
  // others wait for rank 1's eager row; 8 the hub, the root, meets (2048 elements) while the
  // others wait for its eager row.
  for (int n : {3, 4})
    for (int which = 0; which < 9; ++which) {
      INFO(n << " ranks over the sockets, case " << which);
      const int last = n - 1;
      std::vector<std::vector<std::string>> seen(static_cast<size_t>(n));
      auto errors = on_ranks(n, PathPreference::Tcp, [&](GlooBackend& b) {
        const int r = b.rank();
        auto call = [&](const std::function<void()>& f) { record(seen[size_t(r)], f); };
        BroadcastOptions bo;
        if (which == 2) bo.root = r;  // every rank claims the root
        if (which >= 4 && which < 8) bo.root = 1;
        const bool big = (which == 4 && r == 1) || (which == 7 && r <= 1) || (which == 8 && r == 0);
        Tensor t = full(which == 0 && r == last ? 4
                        : big                   ? 2048
                                                : 8,
                        1.0, which == 1 && r == last ? DType::Int32 : DType::Float32);
        const bool meets = (which == 3 && r == last) || (which == 5 && r == 0) || (which == 6 && r == last);
        call([&] { meets ? b.all_reduce(t, {}) : b.broadcast(t, bo); });
        Tensor ok = full(5, 1.0, DType::Float32);
        call([&] { b.all_reduce(ok, {}); });
        call([&] { b.all_reduce(ok, {}); });
      });
      for (int r = 0; r < n; ++r) CHECK(errors[size_t(r)] == "");
      // The rank that must find it at the broadcast, and how its error starts.
      int by = -1;
      std::string found;
      if (which == 0) by = last, found = "broadcast #1: the ranks disagree on the bytes per rank";
      if (which == 1) by = last, found = "broadcast #1: the ranks disagree on the dtype";
      if (which == 3) by = last, found = "all_reduce #1: the ranks disagree on which collective runs";
      if (which == 6) by = 0, found = "broadcast #1: the ranks disagree on which collective runs";
      if (which == 4) by = 0, found = "broadcast #1: the ranks disagree on the bytes per rank";
      if (which == 5) by = 0, found = "all_reduce #1: the ranks disagree on which collective runs";
      if (which == 7 || which == 8) by = 0, found = "broadcast #1: the ranks disagree on the bytes per rank";
      // The mark's error at collective #c, whoever found it.
      auto marked = [](const std::string& e, int c) {
        return e.rfind("collective #" + std::to_string(c) + ": rank ", 0) == 0 &&
               e.find(" found a disagreement on an eager broadcast at collective #") != std::string::npos;
      };
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r);
        const auto& s = seen[size_t(r)];
        REQUIRE(s.size() == 3);
        if (r == by) {
          CHECK_THAT(s[0], Catch::StartsWith(found));
        } else if (which == 2 || ((which == 0 || which == 1 || which == 3) && r == 0) ||
                   ((which == 5 || which == 6) && r == 1)) {
          CHECK(s[0] == "ok");  // a root, which reads nothing (2: every rank)
        } else if (which == 4 || which == 7 || which == 8 || (which == 6 && r == last)) {
          CHECK(marked(s[0], 1));  // the hub's mark, in place of what this rank waits for
        } else if (s[0] != "ok") {
          CHECK((marked(s[0], 1) || s[0].find("disagree") != std::string::npos));  // found too, or read the mark
        }
        if (which == 2 && r == 0)
          CHECK_THAT(s[1], Catch::StartsWith("all_reduce #2: the eager broadcasts rank "));
        else
          CHECK(marked(s[1], 2));
        CHECK(marked(s[2], 3));
      }
    }
}

TEST_CASE("eager broadcasts: the root runs ahead of a stopped receiver up to the ring's depth, then waits", "[eager]") {
  // More broadcasts than the ring holds, from changing roots, of changing sizes up to 512 B,
  // with a meeting now and then, while receivers lag: every rank gets every payload. Over the
  // sockets (two ranks eager, three through the hub) the root runs ahead as far as the socket
  // buffers let it: 64 broadcasts of 8 B, some 10 KiB a receiver, fit them. Over the sockets
  // also 4 ranks, through the hub like 3.
  for (auto path : kPaths)
    for (int n : {2, 3, 4}) {
      if (path == PathPreference::SharedMemory && n == 4) continue;
      INFO("path " << path_name(path) << ", " << n << " ranks");
      const int depth = path == PathPreference::Tcp ? 64 : int(ShmPath::kEagerDepth);
      std::atomic<int> ahead{0};
      auto errors = on_ranks(n, path, [&](GlooBackend& b) {
        const int r = b.rank();
        // A ring's worth of broadcasts needs no receiver: rank 0 posts them all before the others
        // start; on shared memory its next one waits for them.
        if (r == 0) {
          for (int i = 0; i < depth; ++i) {
            Tensor t = full(2, i, DType::Int32);
            b.broadcast(t, {});
          }
          ahead = 1;
        } else {
          for (int waited = 0; ahead == 0; ++waited) {
            if (waited > 20000) throw std::runtime_error("the root did not run a ring's worth of broadcasts ahead");
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          for (int i = 0; i < depth; ++i) {
            Tensor t = full(2, -1, DType::Int32);
            b.broadcast(t, {});
            if (t.get(0) != i || t.get(1) != i) throw std::runtime_error("broadcast " + std::to_string(i) + " wrong");
          }
        }
        for (int i = 0; i < 3 * depth; ++i) {
          const int root = (i / 100) % n, elements = 1 + (i * 37) % 128;
          if (r != root && r == 1 + i % (n - 1) && i % 100 == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));  // this receiver lags
          Tensor t = Tensor::zeros({elements}, DType::Int32);
          for (int e = 0; e < elements; ++e) t.set(e, r == root ? i * 10000 + e : -1);
          BroadcastOptions bo;
          bo.root = root;
          b.broadcast(t, bo);
          for (int e = 0; e < elements; ++e)
            if (t.get(e) != i * 10000 + e)
              throw std::runtime_error("broadcast " + std::to_string(i) + " element " + std::to_string(e) + " is " +
                                       std::to_string(t.get(e)));
          if (i % 64 == 63) {
            Tensor sum = full(3, 1.0, DType::Float32);
            b.all_reduce(sum, {});
            if (sum.get(2) != n)
              throw std::runtime_error("all_reduce between the broadcasts gave " + std::to_string(sum.get(2)));
          }
        }
      });
      for (int r = 0; r < n; ++r) CHECK(errors[size_t(r)] == "");
    }
}

TEST_CASE(
    "through the TCP hub of 3 and 4 ranks: a disagreement of the hub or another rank is the same typed error on every "
    "rank, outputs untouched, and every kind's next call is right",
    "[trust]") {
  // Groups of 3 to 16 on the sockets check their intents through rank 0, and small collectives
  // go through it too: what one rank states reaches the others only in the hub's answer.
  for (int n : {3, 4}) {
    INFO(n << " ranks");
    std::vector<std::vector<std::string>> seen(static_cast<size_t>(n));
    auto errors = on_ranks(n, PathPreference::Tcp, [&](GlooBackend& b) {
      const int r = b.rank();
      auto& mine = seen[size_t(r)];
      auto expect = [&](const char* what, const std::function<void()>& f, const Tensor& out, double was) {
        try {
          f();
          mine.push_back(std::string(what) + ": no error");
        } catch (const CollectiveMismatchError& e) {
          mine.push_back(e.what());
        }
        for (int64_t e = 0; e < out.numel(); ++e)
          if (out.get(e) != was) throw std::runtime_error(std::string(what) + " wrote its output on a mismatch");
      };
      for (int odd : {0, n - 1}) {  // the hub disagrees, then the last rank
        const bool me = r == odd;
        Tensor t = full(me ? 3 : 2, 5.0, DType::Float32);
        expect(
            "all_reduce", [&] { b.all_reduce(t, {}); }, t, 5.0);
        Tensor in = full(2, 5.0, me ? DType::Int32 : DType::Float32), out = full(2 * n, -1.0, DType::Float32);
        expect(
            "all_gather", [&] { b.all_gather(in, out, {}); }, out, -1.0);
        // Over 512 B, so that it meets: a disagreement on an eager broadcast leaves the group
        // broken (the eager cases).
        BroadcastOptions bo;
        bo.root = me ? 1 : 2;
        Tensor big = full(200, 5.0, DType::Float32);
        expect(
            "broadcast", [&] { b.broadcast(big, bo); }, big, 5.0);
        ReduceOptions ro;
        ro.op = me ? ReduceOp::Max : ReduceOp::Sum;
        expect(
            "reduce", [&] { b.reduce(t, ro); }, t, 5.0);
        Tensor blocks = full(me ? 2 * n + 1 : 2 * n, 5.0, DType::Float32), block = full(2, -1.0, DType::Float32);
        expect(
            "reduce_scatter", [&] { b.reduce_scatter(blocks, block, {}); }, block, -1.0);
        ScatterOptions so;
        so.root = me ? 0 : 1;
        expect(
            "scatter", [&] { b.scatter(blocks, block, so); }, block, -1.0);
      }
      // Agreed: each kind through the hub, every element checked.
      auto check = [&](const char* what, const Tensor& got, const std::function<double(int64_t)>& want) {
        for (int64_t e = 0; e < got.numel(); ++e)
          if (got.get(e) != want(e))
            throw std::runtime_error(std::string(what) + ": element " + std::to_string(e) + " is " +
                                     std::to_string(got.get(e)) + ", not " + std::to_string(want(e)));
      };
      const int64_t k = 3;
      auto value = [](int p, int64_t e) { return double(100 * p + e); };
      auto mine_of = [&](int p, int64_t count) {
        Tensor v = Tensor::zeros({count}, DType::Float32);
        for (int64_t e = 0; e < count; ++e) v.set(e, value(p, e));
        return v;
      };
      auto sum_of = [&](int64_t e) {
        double s = 0;
        for (int p = 0; p < n; ++p) s += value(p, e);
        return s;
      };
      Tensor t = mine_of(r, k);
      b.all_reduce(t, {});
      check("all_reduce", t, sum_of);
      Tensor out = Tensor::zeros({k * n}, DType::Float32);
      b.all_gather(mine_of(r, k), out, {});
      check("all_gather", out, [&](int64_t e) { return value(int(e / k), e % k); });
      for (int root = 0; root < n; ++root) {
        BroadcastOptions bo;
        bo.root = root;
        t = mine_of(r, k);
        b.broadcast(t, bo);
        check("broadcast", t, [&](int64_t e) { return value(root, e); });
        ReduceOptions ro;
        ro.root = root;
        t = mine_of(r, k);
        b.reduce(t, ro);
        check("reduce", t, [&](int64_t e) { return r == root ? sum_of(e) : value(r, e); });
        GatherOptions go;
        go.root = root;
        Tensor gathered = Tensor::zeros({k * n}, DType::Float32);
        b.gather(mine_of(r, k), gathered, go);
        if (r == root) check("gather", gathered, [&](int64_t e) { return value(int(e / k), e % k); });
        ScatterOptions so;
        so.root = root;
        Tensor block = Tensor::zeros({k}, DType::Float32);
        b.scatter(mine_of(r, k * n), block, so);
        check("scatter", block, [&](int64_t e) { return value(root, r * k + e); });
      }
      Tensor block = Tensor::zeros({k}, DType::Float32);
      b.reduce_scatter(mine_of(r, k * n), block, {});
      check("reduce_scatter", block, [&](int64_t e) { return sum_of(r * k + e); });
    });
    for (int r = 0; r < n; ++r) CHECK(errors[size_t(r)] == "");
    REQUIRE(seen[0].size() == 12);
    for (const std::string& e : seen[0]) CHECK_THAT(e, !Catch::EndsWith("no error"));
    for (int r = 1; r < n; ++r) CHECK(seen[size_t(r)] == seen[0]);
  }
}

TEST_CASE("through the TCP hub of 4 ranks: a rank that never reaches a collective is named on every other rank",
          "[trust][sockets]") {
  // The others wait only for the hub's answer; the hub's verdict names the rank it waited for.
  const int n = 4, absent = 2;
  std::atomic<int> finished{0};
  std::vector<std::vector<int>> named(static_cast<size_t>(n));
  auto errors = on_ranks(n, PathPreference::Tcp, [&](GlooBackend& b) {
    const int r = b.rank();
    Tensor t = full(4, 1.0, DType::Float32);
    b.all_reduce(t, {});  // every rank is up before the one that counts
    if (r == absent) {    // stays connected, so that its silence is a timeout, not a lost peer
      for (int waited = 0; finished < n - 1 && waited < 600; ++waited)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return;
    }
    AllreduceOptions o;
    // The hub gives up first, so that every other rank has its verdict well before its own
    // deadline, however late the scheduler lets it start.
    o.timeout = std::chrono::milliseconds(r == 0 ? 1500 : 4000);
    try {
      b.all_reduce(t, o);
    } catch (const TimeoutError& e) {
      named[size_t(r)] = e.ranks();
    }
    ++finished;
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[size_t(r)]);
    CHECK(errors[size_t(r)].empty());
    if (r != absent) CHECK(named[size_t(r)] == std::vector<int>{absent});
  }
}

namespace {

// Runs an all_reduce on n ranks of which `absent` never comes (it stays connected, so that its
// silence is a timeout, not a lost peer); before it, rank `pending_at` posts a receive from
// rank `pending_from`, which never sends. The ranks each TimeoutError named, by rank.
std::vector<std::vector<int>> named_by_timeouts(int n, PathPreference path, int absent, int pending_at = -1,
                                                int pending_from = -1) {
  std::atomic<int> finished{0}, started{0};
  std::vector<std::vector<int>> named(static_cast<size_t>(n));
  auto errors = on_ranks(n, path, [&](GlooBackend& b) {
    const int r = b.rank();
    Tensor t = full(4, 1.0, DType::Float32);
    b.all_reduce(t, {});  // every rank is up before the one that counts
    // No rank leaves (closing its connections) before every other is done.
    auto leave = [&] {
      for (int waited = 0; finished < n - 1 && waited < 600; ++waited)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    };
    if (r == absent) return leave();
    Tensor never = full(4, 0.0, DType::Float32);
    auto pending = r == pending_at ? b.irecv(never, pending_from, {}) : nullptr;
    // The ranks that come enter together: however late the scheduler lets one of them start,
    // a timeout names only the absent rank.
    ++started;
    for (int waited = 0; started < n - 1 && waited < 10000; ++waited)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    AllreduceOptions o;
    o.timeout = std::chrono::milliseconds(500);
    try {
      b.all_reduce(t, o);
    } catch (const TimeoutError& e) {
      named[size_t(r)] = e.ranks();
    } catch (...) {
      ++finished;
      throw;
    }
    ++finished;
    leave();
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[size_t(r)]);
    CHECK(errors[size_t(r)].empty());
  }
  return named;
}

}  // namespace

TEST_CASE("through the TCP hub, a timeout names the hub it waited for, not a peer with a receive pending",
          "[trust][sockets]") {
  const auto named = named_by_timeouts(3, PathPreference::Tcp, 0, 1, 2);
  CHECK(named[1] == std::vector<int>{0});
  CHECK(named[2] == std::vector<int>{0});
}

TEST_CASE("on shared memory, a timeout names the rank that did not come", "[trust]") {
  const auto named = named_by_timeouts(3, PathPreference::SharedMemory, 2);
  CHECK(named[0] == std::vector<int>{2});
  CHECK(named[1] == std::vector<int>{2});
}

TEST_CASE("over Gloo's pairs, a receive that times out names the rank it waited for", "[trust]") {
  // On shared memory no socket mesh is made: point-to-point goes over Gloo's pairs.
  std::atomic<bool> done{false};
  std::vector<int> named;
  auto errors = on_ranks(2, PathPreference::SharedMemory, [&](GlooBackend& b) {
    if (b.rank() == 1) {  // stays connected, so that its silence is a timeout, not a lost peer
      for (int waited = 0; !done && waited < 10000; ++waited) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    Tensor never = full(4, 0.0, DType::Float32);
    SendOptions o;
    o.timeout = std::chrono::milliseconds(200);
    try {
      b.recv(never, 1, o);
    } catch (const TimeoutError& e) {
      named = e.ranks();
    }
    done = true;
  });
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  CHECK(named == std::vector<int>{1});
}

TEST_CASE("3 ranks on TCP disagreeing across the hub's threshold: the same typed error on every rank",
          "[trust][sockets]") {
  // Ranks 0 and 1 state 64 KiB (through the hub), rank 2 four bytes more (the ring; for a
  // broadcast, the direct schedule): the check settles before either schedule moves a byte.
  const int n = 3;
  std::vector<std::string> seen(static_cast<size_t>(2 * n));
  auto errors = on_ranks(n, PathPreference::Tcp, [&](GlooBackend& b) {
    const int64_t elements = ((int64_t(64) << 10) + (b.rank() == 2 ? 4 : 0)) / 4;
    for (int k = 0; k < 2; ++k) {
      Tensor t = full(elements, 1.0, DType::Float32);
      try {
        if (k == 0)
          b.all_reduce(t, {});
        else
          b.broadcast(t, {});  // root 0, the hub
      } catch (const CollectiveMismatchError& e) {
        seen[size_t(k * n + b.rank())] = e.what();
      }
      Tensor agreed = full(4, 1.0, DType::Float32);  // the group still works
      b.all_reduce(agreed, {});
      if (agreed.get(0) != n) throw std::runtime_error("the next all_reduce is wrong");
    }
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[size_t(r)]);
    CHECK(errors[size_t(r)].empty());
    for (int k = 0; k < 2; ++k) {
      CHECK_FALSE(seen[size_t(k * n + r)].empty());
      CHECK(seen[size_t(k * n + r)] == seen[size_t(k * n)]);
    }
  }
}

TEST_CASE("over the sockets a send whose receiver left fails at once and a receive from another rank goes on",
          "[trust][sockets]") {
  // Rank 1 leaves with most of rank 0's large send unread: rank 0's connection to it fails
  // while rank 0 waits for rank 2's message. That wait must go on, and the send's own wait
  // raise the loss, naming rank 1, at once rather than wait out its timeout.
  const int64_t n = int64_t(16) << 20;
  std::promise<void> posted, leaving;
  auto errors = on_ranks(3, PathPreference::Tcp, [&](GlooBackend& b) {
    SendOptions o;
    o.timeout = std::chrono::seconds(30);
    Tensor token = full(1, 5.0, DType::Int32);
    if (b.rank() == 1) {
      b.recv(token, 0, o);  // the pair is connected: what follows is the loss of a peer
      posted.get_future().wait();
      leaving.set_value();
      return;
    }
    if (b.rank() == 2) {
      leaving.get_future().wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      b.send(token, 0, o);
      return;
    }
    b.send(token, 1, o);
    Tensor big = full(n, 1.0, DType::UInt8);
    auto sent = b.isend(big, 1, o);
    posted.set_value();
    Tensor got = full(1, 0.0, DType::Int32);
    b.irecv(got, 2, o)->wait(o.timeout);
    if (got.get(0) != 5.0) throw std::runtime_error("the token from rank 2 is wrong");
    expect_lost(*sent, o.timeout, "the send to the rank that left");
  });
  for (int r = 0; r < 3; ++r) CHECK(errors[size_t(r)] == "");
}

TEST_CASE("over the sockets a receive from a rank that left fails its own wait and receives from another rank go on",
          "[trust][sockets]") {
  // Rank 1 leaves while rank 0 has a receive from it posted: that connection ends under the
  // receive. Rank 0's waits for rank 2's messages must go on, however often they read the end,
  // and the receive's own wait raise the loss, naming rank 1, at once.
  std::promise<void> posted;
  std::shared_future<void> went = posted.get_future().share();
  auto errors = on_ranks(3, PathPreference::Tcp, [&](GlooBackend& b) {
    SendOptions o;
    o.timeout = std::chrono::seconds(30);
    Tensor token = full(1, 5.0, DType::Int32);
    if (b.rank() == 1) {
      b.recv(token, 0, o);  // the pair is connected: what follows is the loss of a peer
      went.wait();
      return;  // leaves: its backend closes the connection
    }
    if (b.rank() == 2) {
      went.wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // after rank 1's end, mostly
      for (int i = 0; i < 2; ++i) b.send(token, 0, o);
      return;
    }
    b.send(token, 1, o);
    Tensor never = full(1, 0.0, DType::Int32);
    auto pending = b.irecv(never, 1, o);
    posted.set_value();
    for (int i = 0; i < 2; ++i) {
      Tensor got = full(1, 0.0, DType::Int32);
      b.irecv(got, 2, o)->wait(o.timeout);
      if (got.get(0) != 5.0) throw std::runtime_error("the token from rank 2 is wrong");
    }
    expect_lost(*pending, o.timeout, "the receive from the rank that left");
  });
  for (int r = 0; r < 3; ++r) CHECK(errors[size_t(r)] == "");
}

TEST_CASE("over the sockets an eager broadcast's root whose receiver left learns the loss, not a mismatch", "[eager]") {
  // The root of an eager broadcast reads nothing: a receiver that left is the loss of that peer
  // at the root's next call that needs it (a send the socket refuses, or a row it waits for),
  // never a mismatch or a wait to the deadline. In 3 ranks the last leaves; rank 1 stays, and
  // loses the root in turn.
  for (int n : {2, 3}) {
    INFO(n << " ranks");
    auto errors = on_ranks(n, PathPreference::Tcp, [&](GlooBackend& b) {
      Tensor t = full(4, 1.0, DType::Float32);
      b.broadcast(t, {});
      if (b.rank() == n - 1) return;  // leaves: its backend closes its connections
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const auto start = std::chrono::steady_clock::now();
      try {
        for (int i = 0; i < 100; ++i) b.broadcast(t, {});
        b.all_reduce(t, {});
      } catch (const CollectiveMismatchError& e) {
        throw std::runtime_error(std::string("a mismatch for a lost peer: ") + e.what());
      } catch (const BackendError&) {  // the mesh's loss of the peer (PeerError where liveness knows it)
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10))
          throw std::runtime_error("the loss was raised only after 10 s");
        return;
      }
      throw std::runtime_error("rank " + std::to_string(b.rank()) + " raised nothing");
    });
    for (int r = 0; r < n; ++r) CHECK(errors[size_t(r)] == "");
  }
}

namespace {

// Runs `n` ranks over the sockets: every rank but `root` calls `receive`, then stays connected,
// calling nothing, until the root is done; the root calls `act`. Returns how the root's `act`
// ended: "mismatch: ", "timeout: " or "error: " and the error's text, or "done".
std::string while_receivers_stay(int n, int root, const std::function<void(GlooBackend&)>& receive,
                                 const std::function<void(GlooBackend&)>& act) {
  std::string root_saw;
  std::atomic<bool> root_done{false};
  auto errors = on_ranks(n, PathPreference::Tcp, [&](GlooBackend& b) {
    if (b.rank() != root) {
      receive(b);
      for (int waited = 0; !root_done && waited < 30000; ++waited)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    try {
      act(b);
      root_saw = "done";
    } catch (const CollectiveMismatchError& e) {
      root_saw = std::string("mismatch: ") + e.what();
    } catch (const TimeoutError& e) {
      root_saw = std::string("timeout: ") + e.what();
    } catch (const Error& e) {
      root_saw = std::string("error: ") + e.what();
    }
    root_done = true;
  });
  for (int r = 0; r < n; ++r) CHECK(errors[size_t(r)] == "");
  return root_saw;
}

// Broadcasts `t` as a receiver that disagrees with its root: raises unless the broadcast does.
void disagree(GlooBackend& b, Tensor& t) {
  try {
    b.broadcast(t, {});
  } catch (const CollectiveMismatchError&) {
    return;
  }
  throw std::runtime_error("the receiver took a broadcast of other bytes");
}

}  // namespace

TEST_CASE("over the sockets an eager root whose receiver disagreed and stopped learns why once its socket fills",
          "[eager]") {
  // The root of an eager broadcast reads nothing, and a receiver that found a disagreement
  // reads no more of its broadcasts: the root's socket fills. Its wait then raises the
  // receiver's word, a mismatch naming it, not a timeout.
  Tensor small = full(4, 1.0, DType::Float32), large = full(8, 1.0, DType::Float32);
  const std::string root_saw = while_receivers_stay(
      2, 0, [&](GlooBackend& b) { disagree(b, small); },
      [&](GlooBackend& b) {
        BroadcastOptions o;
        o.timeout = std::chrono::seconds(1);
        for (int i = 0; i < 1000000; ++i) b.broadcast(large, o);
      });
  CHECK_THAT(root_saw, Catch::StartsWith("mismatch: rank 1 reads nothing more of what this rank sends"));
}

TEST_CASE("over the sockets a send to a receiver that disagreed but still reads sends times out, not a mismatch",
          "[eager]") {
  // A receiver's word that it reads nothing more covers its group's rows only: its point-to-point
  // receives go on, so a send to it that waits for a late receive is a timeout, as anywhere.
  Tensor small = full(4, 1.0, DType::Float32), large = full(8, 1.0, DType::Float32);
  const std::string root_saw = while_receivers_stay(
      2, 0, [&](GlooBackend& b) { disagree(b, small); },
      [&](GlooBackend& b) {
        b.broadcast(large, {});  // eager: the root returns at once
        SendOptions o;
        o.timeout = std::chrono::milliseconds(500);
        b.send(full(int64_t(4) << 20, 2.0, DType::Float32), 1, o);  // more than the socket holds
      });
  CHECK_THAT(root_saw, Catch::StartsWith("timeout: "));
}

TEST_CASE("over the sockets a root claimed by both then by neither never lets a later call pass", "[eager]") {
  // Both ranks root the first eager broadcast (each rooted one, received none), then each takes
  // the other for the root of the second (each waits, and would have received one): the counts
  // alone would cancel. The receivers that time out mark the group broken, so the all_reduce
  // after them raises a mismatch on each rank instead of passing.
  std::vector<std::string> third(2);
  std::atomic<int> finished{0};
  auto errors = on_ranks(2, PathPreference::Tcp, [&](GlooBackend& b) {
    const int r = b.rank();
    Tensor t = full(2, r + 1, DType::Float32);
    BroadcastOptions bo;
    bo.root = r;
    b.broadcast(t, bo);
    bo.root = 1 - r;
    bo.timeout = std::chrono::milliseconds(300);
    try {
      b.broadcast(t, bo);
    } catch (const TimeoutError&) {
    }
    Tensor s = full(2, 1, DType::Float32);
    try {
      b.all_reduce(s, {});
      third[size_t(r)] = "passed";
    } catch (const CollectiveMismatchError& e) {
      third[size_t(r)] = e.what();
    }
    // Neither leaves (closing its connections) before the other's calls are done.
    ++finished;
    for (int i = 0; i < 1000 && finished < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(errors[size_t(r)] == "");
    CHECK_THAT(third[size_t(r)], Catch::Contains("found a disagreement on an eager broadcast"));
  }
}

TEST_CASE("over the sockets a receiver that disagrees and leaves is a mismatch at its root's next call", "[eager]") {
  // The receiver's mark goes to the exchange the eager root reads next, so the root raises the
  // disagreement even though the receiver makes no further call, not the closed connection.
  std::string root_saw;
  auto errors = on_ranks(2, PathPreference::Tcp, [&](GlooBackend& b) {
    const int r = b.rank();
    Tensor t = full(r == 1 ? 4 : 8, 1.0, DType::Float32);
    if (r == 1) {
      try {
        b.broadcast(t, {});
      } catch (const CollectiveMismatchError&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        return;  // leaves: its backend closes the connection
      }
      throw std::runtime_error("the receiver took a broadcast of other bytes");
    }
    b.broadcast(t, {});
    Tensor s = full(2, 1, DType::Float32);
    try {
      b.all_reduce(s, {});
      root_saw = "passed";
    } catch (const CollectiveMismatchError& e) {
      root_saw = e.what();
    } catch (const Error& e) {
      root_saw = std::string("not a mismatch: ") + e.what();
    }
  });
  for (int r = 0; r < 2; ++r) CHECK(errors[size_t(r)] == "");
  CHECK_THAT(root_saw, Catch::Contains("rank 1 found a disagreement on an eager broadcast"));
}

TEST_CASE("through the TCP hub, eager broadcasts the hub roots after a receiver disagreed raise its mark on every rank",
          "[eager]") {
  // The hub, as the root, reads nothing of its broadcast: before its rows go it takes, in one
  // poll, a mark that came for this exchange, and sends the mark in their place. Rank 3 finds
  // the first broadcast's bytes apart; the hub's next broadcast starts once rank 3 has raised
  // (its mark sent), so every rank raises the mark at the second broadcast.
  constexpr int n = 4;
  std::vector<std::vector<std::string>> seen(n);
  std::atomic<bool> found{false};
  auto errors = on_ranks(n, PathPreference::Tcp, [&](GlooBackend& b) {
    const int r = b.rank();
    auto call = [&](const std::function<void()>& f) { record(seen[size_t(r)], f); };
    Tensor t = full(r == n - 1 ? 4 : 8, 1.0, DType::Float32);
    call([&] { b.broadcast(t, {}); });
    if (r == n - 1) found = true;
    for (int waited = 0; r == 0 && !found && waited < 20000; ++waited)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    Tensor u = full(8, 1.0, DType::Float32);
    call([&] { b.broadcast(u, {}); });
    call([&] { b.broadcast(u, {}); });
  });
  auto marked = [](const std::string& e, int c) {
    return e.rfind("collective #" + std::to_string(c) + ": rank 3 found a disagreement on an eager broadcast", 0) == 0;
  };
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(errors[size_t(r)] == "");
    REQUIRE(seen[size_t(r)].size() == 3);
    if (r == n - 1)
      CHECK_THAT(seen[size_t(r)][0], Catch::StartsWith("broadcast #1: the ranks disagree on the bytes per rank"));
    else
      CHECK(seen[size_t(r)][0] == "ok");
    CAPTURE(seen[size_t(r)][1]);
    CHECK(marked(seen[size_t(r)][1], 2));
    CHECK(marked(seen[size_t(r)][2], 3));
  }
}

TEST_CASE("through the TCP hub, an eager root whose receiver disagreed and stopped learns why once its socket fills",
          "[eager]") {
  // Three ranks, root 1 (not the hub): it runs ahead while rank 2 comes late, so that the marks
  // rank 2 sends are for exchanges root 1 has left. Rank 2 finds the bytes apart and stops, as
  // does the hub after the first broadcast: root 1's sockets fill, and its wait raises the
  // receivers' word that they read nothing more, a mismatch, not a timeout.
  BroadcastOptions o;
  o.root = 1;
  const std::string root_saw = while_receivers_stay(
      3, 1,
      [&](GlooBackend& b) {
        Tensor t = full(b.rank() == 2 ? 4 : 8, 1.0, DType::Float32);
        if (b.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        try {
          b.broadcast(t, o);
        } catch (const CollectiveMismatchError&) {  // the hub may learn of it at this call, or not
        }
      },
      [&](GlooBackend& b) {
        Tensor t = full(8, 1.0, DType::Float32);
        BroadcastOptions ahead = o;
        ahead.timeout = std::chrono::seconds(1);
        for (int i = 0; i < 1000000; ++i) b.broadcast(t, ahead);
      });
  CHECK_THAT(root_saw, Catch::Matches("mismatch: rank [02] reads nothing more of what this rank sends .*"));
}
