// NcclBackend over a stand-in for the CUDA runtime and NCCL (tests/nccl/fake/fake_cuda.cpp,
// loaded by libdistrun in place of the real libraries through LD_LIBRARY_PATH): the ordering and
// locking of distrun's own calls, checked on any machine. The stand-in moves no data between
// ranks; these tests look at which calls distrun makes, from which thread, and when memory goes.
#include <dirent.h>
#include <dlfcn.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <thread>

#include "distrun/bench/engine.hpp"
#include "distrun/core/error.hpp"
#include "distrun/nccl/cuda_library.hpp"
#include "distrun/nccl/nccl_backend.hpp"
#include "nccl_ranks.hpp"

using namespace distrun;
using namespace std::chrono_literals;

namespace {

// A control of the stand-in, once libdistrun has loaded it as the CUDA runtime.
template <typename F>
F* fake(const char* name) {
  nccl::load_cuda_library(nccl::CudaLibrary::Runtime);
  void* f = dlsym(RTLD_DEFAULT, name);
  if (!f) FAIL("the CUDA stand-in is not loaded (" << name << "): run with LD_LIBRARY_PATH at tests/nccl/fake's build");
  return reinterpret_cast<F*>(f);
}

int threads_now() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// Ranks as threads meet here: returns once `arrived` reaches `count` (every rank adds one).
void meet(std::atomic<int>& arrived, int count) {
  ++arrived;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (arrived < count) {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("a rank never arrived");
    std::this_thread::sleep_for(100us);
  }
}

}  // namespace

TEST_CASE("the watchdog and the owner never call NCCL on one communicator at once", "[nccl][stub]") {
  // Every wait here blocks (events complete 200 us after they are recorded), so the watchdog
  // looks at ncclCommGetAsyncError every 100 ms while the owner launches; the stand-in counts a
  // second thread inside NCCL on one communicator. 10^4 all_reduces: at most one thread of
  // distrun's per communicator (its watchdog), none per operation.
  fake<void(int)>("fake_cuda_set_event_delay_us")(200);
  const int before = fake<int()>("fake_nccl_concurrent_calls")();
  const int threads_before = threads_now();
  int most = 0;
  testing::run_nccl_ranks(1, [&](NcclBackend& b, int) {
    Tensor t = Tensor::zeros({8}, DType::Float32, Device::cuda(0));
    for (int i = 0; i < 10000; ++i) {
      b.all_reduce(t, AllreduceOptions{});
      if (i % 100 == 0) most = std::max(most, threads_now());
    }
  });
  CHECK(fake<int()>("fake_nccl_concurrent_calls")() == before);
  CHECK(most <= threads_before + 2);  // the rank's thread and its communicator's watchdog
}

TEST_CASE("NCCL's own collectives start no thread per operation", "[nccl][stub]") {
  // The stand-in starts a thread for every group on a nonblocking communicator, as NCCL 2.28
  // does; collectives on the blocking twin run inline. 10^3 of each collective on two ranks,
  // counted from when both ranks are set up (the set-up's groups do start threads).
  fake<void(int)>("fake_cuda_set_event_delay_us")(0);
  const auto group_threads = fake<int()>("fake_nccl_group_threads");
  const int at_start = group_threads();
  std::atomic<int> arrived{0}, ops{0};
  int set_up = 0, after = 0;
  testing::run_nccl_ranks(2, [&](NcclBackend& b, int r) {
    Tensor t = Tensor::zeros({8}, DType::Float32, Device::cuda(r));
    Tensor all = Tensor::zeros({16}, DType::Float32, Device::cuda(r));
    meet(arrived, 2);
    if (r == 0) set_up = group_threads();
    meet(arrived, 4);
    for (int i = 0; i < 1000; ++i) {
      b.all_reduce(t, AllreduceOptions{});
      b.broadcast(t, BroadcastOptions{});
      b.reduce(t, ReduceOptions{});
      b.all_gather(t, all, AllgatherOptions{});
      b.reduce_scatter(all, t, ReduceScatterOptions{});
      b.barrier(BarrierOptions{});
      ops += 6;
    }
    meet(arrived, 6);
    if (r == 0) after = group_threads();
  });
  CHECK(ops == 12000);
  CHECK(set_up > at_start);  // the stand-in does count nonblocking groups
  CHECK(after == set_up);    // and the collectives started none
  // The twin's connections are made while it is created, so no launch on it waits for a peer.
  const char* connect = std::getenv("NCCL_RUNTIME_CONNECT");
  REQUIRE(connect);
  CHECK(std::string(connect) == "0");
}

TEST_CASE("gather and scatter hand NCCL a valid buffer on every rank", "[nccl][stub]") {
  // The stand-in refuses a null buffer as NCCL 2.28 does under NCCL_CHECK_POINTERS=1.
  fake<void(int)>("fake_cuda_set_event_delay_us")(0);
  std::atomic<int> calls{0};
  testing::run_nccl_ranks(2, [&](NcclBackend& b, int r) {
    Tensor in = Tensor::zeros({4}, DType::Int32, Device::cuda(r));
    Tensor out = Tensor::zeros({8}, DType::Int32, Device::cuda(r));
    Tensor mine = Tensor::zeros({4}, DType::Int32, Device::cuda(r));
    for (int root : {0, 1}) {
      GatherOptions g;
      g.root = root;
      b.gather(in, out, g);
      ScatterOptions s;
      s.root = root;
      b.scatter(out, mine, s);
      calls += 2;
    }
  });
  CHECK(calls == 8);  // each rank's gather and scatter on both roots, none refused
}

TEST_CASE("a dropped isend parks no stream and keeps its tensor until the transfer is done", "[nccl][stub]") {
  // The stand-in keeps every transfer pending until released (a peer slow to receive). Dropping
  // the Work must not make the legacy default stream wait for it (every later launch and copy,
  // and the abort, would wait behind it), and its memory must stay allocated until it is done.
  fake<void(int)>("fake_cuda_set_event_delay_us")(0);
  const int legacy_before = fake<int()>("fake_cuda_legacy_waits_on_pending")();
  std::atomic<int> arrived{0};
  testing::run_nccl_ranks(2, [&](NcclBackend& b, int r) {
    if (r == 0) fake<void(bool)>("fake_cuda_hold_p2p")(true);
    meet(arrived, 2);
    Tensor t = Tensor::zeros({8}, DType::Float32, Device::cuda(r));
    Tensor payload = Tensor::zeros({1024}, DType::Float32, Device::cuda(r));
    const void* sent = payload.data();
    std::shared_ptr<Work> first;
    if (r == 0) {
      b.isend(payload, 1, SendOptions{});  // dropped, and the test's handle goes too
      payload = Tensor();
    } else {
      first = b.irecv(payload, 0, SendOptions{});
    }
    b.all_reduce(t, AllreduceOptions{});  // a later collective runs
    if (r == 0) {
      CHECK(fake<int()>("fake_cuda_legacy_waits_on_pending")() == legacy_before);
      CHECK_FALSE(fake<bool(const void*)>("fake_cuda_was_freed")(sent));
      fake<void(bool)>("fake_cuda_hold_p2p")(false);
      fake<void()>("fake_cuda_release_p2p")();
    }
    meet(arrived, 4);
    if (r == 1) first->wait();
    meet(arrived, 6);
    Tensor next = Tensor::zeros({4}, DType::Float32, Device::cuda(r));
    if (r == 0) {
      b.isend(next, 1, SendOptions{})->wait();  // looks at the channel's unwaited transfers first
      CHECK(fake<bool(const void*)>("fake_cuda_was_freed")(sent));
    } else {
      b.irecv(next, 0, SendOptions{})->wait();
    }
  });
}

TEST_CASE("pair communicators are made at first use, only for the pairs used", "[nccl][stub]") {
  // Three ranks: the collectives' communicator has three, every point-to-point channel two, so
  // the stand-in's count of two-rank communicators counts channels (one per side).
  fake<void(int)>("fake_cuda_set_event_delay_us")(0);
  setenv("CUDA_VISIBLE_DEVICES", "0,1,2", 1);  // the stand-in shows as many devices as listed
  const auto pairs = fake<int()>("fake_nccl_pair_comms");
  const auto not_ready = fake<int()>("fake_nccl_not_ready_launches");
  const auto blocking_connects = fake<int()>("fake_nccl_blocking_connects");
  const int pairs_at_start = pairs(), not_ready_at_start = not_ready(), connects_at_start = blocking_connects();
  std::atomic<int> arrived{0};
  int after_init = -1, after_one = -1, after_two = -1, after_repeats = -1, after_group = -1;
  testing::run_nccl_ranks(3, [&](NcclBackend& b, int r) {
    Tensor t = Tensor::zeros({16}, DType::Float32, Device::cuda(r));
    meet(arrived, 3);
    if (r == 0) after_init = pairs() - pairs_at_start;
    meet(arrived, 6);
    if (r == 0) b.send(t, 1, SendOptions{});
    if (r == 1) b.recv(t, 0, SendOptions{});
    meet(arrived, 9);
    if (r == 0) after_one = pairs() - pairs_at_start;
    meet(arrived, 12);
    if (r == 2) b.send(t, 0, SendOptions{});
    if (r == 0) b.recv(t, 2, SendOptions{});
    meet(arrived, 15);
    if (r == 0) after_two = pairs() - pairs_at_start;
    meet(arrived, 18);
    for (int i = 0; i < 50; ++i) {
      if (r == 0) b.isend(t, 1, SendOptions{})->wait();
      if (r == 1) b.irecv(t, 0, SendOptions{})->wait();
    }
    meet(arrived, 21);
    if (r == 0) after_repeats = pairs() - pairs_at_start;
    meet(arrived, 24);
    std::shared_ptr<Backend> group = b.new_group({0, 1, 2});
    Tensor sum = Tensor::zeros({4}, DType::Float32, Device::cuda(r));
    group->all_reduce(sum, AllreduceOptions{});
    meet(arrived, 27);
    if (r == 0) after_group = pairs() - pairs_at_start;
    meet(arrived, 30);
  });
  unsetenv("CUDA_VISIBLE_DEVICES");
  CHECK(after_init == 0);
  CHECK(after_one == 2);  // rank 0's channel to 1 and rank 1's from 0
  CHECK(after_two == 4);  // and rank 2's to 0, rank 0's from 2
  CHECK(after_repeats == 4);
  CHECK(after_group == 4);  // a new group makes none either
  CHECK(not_ready() == not_ready_at_start);
  CHECK(blocking_connects() == connects_at_start);  // no launch waited inline for a peer's connection
}

TEST_CASE("a first isend returns before its peer joins, and goes out with no later call", "[nccl][stub]") {
  // The stand-in's send completes only when the peer has launched the matching receive, and its
  // channel is ready only when both ranks have joined. Rank 1 joins only after rank 0's isend
  // has returned (an isend that waited for its peer would time out first), and rank 0 makes no
  // call on the backend after dropping its Work: the channel's set-up launches it.
  fake<void(int)>("fake_cuda_set_event_delay_us")(0);
  std::atomic<bool> returned{false};
  std::atomic<int> arrived{0};
  testing::run_nccl_ranks(
      2,
      [&](NcclBackend& b, int r) {
        Tensor t = Tensor::zeros({16}, DType::Float32, Device::cuda(r));
        if (r == 0) {
          b.isend(t, 1, SendOptions{});
          returned = true;
        } else {
          const auto until = std::chrono::steady_clock::now() + 30s;
          while (!returned && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
          REQUIRE(returned);
          auto w = b.irecv(t, 0, SendOptions{});
          w->wait();
          CHECK(w->is_completed());
        }
        meet(arrived, 2);
      },
      5000ms);
}

TEST_CASE("a send nobody receives is a TimeoutError within its timeout, channel set up or not", "[nccl][stub]") {
  // Rank 1 is alive but never joins rank 0's channel: the set-up gives up at the send's
  // deadline. Then over rank 1's channel, set up by a first transfer, a second send rank 0
  // never receives: its event never completes, and the watchdog ends the wait at the deadline.
  fake<void(int)>("fake_cuda_set_event_delay_us")(0);
  std::atomic<int> arrived{0};
  const auto timeout = 2000ms;
  testing::run_nccl_ranks(
      2,
      [&](NcclBackend& b, int r) {
        Tensor t = Tensor::zeros({16}, DType::Float32, Device::cuda(r));
        auto timed_out_in_time = [&](const std::shared_ptr<Work>& w) {
          const auto start = std::chrono::steady_clock::now();
          CHECK_THROWS_AS(w->wait(), TimeoutError);
          CHECK(std::chrono::steady_clock::now() - start < timeout + 5s);
          CHECK(w->is_completed());  // wait() now fails at once: the channel was aborted
        };
        if (r == 0) timed_out_in_time(b.isend(t, 1, SendOptions{}));
        meet(arrived, 2);
        if (r == 1) b.send(t, 0, SendOptions{});
        if (r == 0) b.recv(t, 1, SendOptions{});
        if (r == 1) timed_out_in_time(b.isend(t, 0, SendOptions{}));
        meet(arrived, 4);
      },
      timeout);
}

TEST_CASE("gather, scatter, all_to_all and send/recv start no thread per operation", "[nccl][stub]") {
  // After the first of each (which connects its peers on the nonblocking communicator, or sets
  // up the channels), 10^4 of each kind on two ranks: the stand-in starts a thread for every
  // group on a nonblocking communicator, as NCCL 2.28 does, and counts launches on a blocking
  // one that would have to connect.
  fake<void(int)>("fake_cuda_set_event_delay_us")(0);
  const auto group_threads = fake<int()>("fake_nccl_group_threads");
  const auto blocking_connects = fake<int()>("fake_nccl_blocking_connects");
  const int connects_at_start = blocking_connects();
  std::atomic<int> arrived{0}, ops{0};
  int warm = 0, after = 0, threads_warm = 0, most = 0;
  const int n = 10000;
  fake<void(bool)>("fake_nccl_call_sleeps")(false);  // what is counted here needs no overlap
  testing::run_nccl_ranks(2, [&](NcclBackend& b, int r) {
    Tensor in = Tensor::zeros({8}, DType::Float32, Device::cuda(r));
    Tensor all = Tensor::zeros({16}, DType::Float32, Device::cuda(r));
    const int peer = 1 - r;
    auto each = [&](int i) {
      GatherOptions g;
      g.root = i % 2;
      b.gather(in, all, g);
      ScatterOptions s;
      s.root = i % 2;
      b.scatter(all, in, s);
      b.all_to_all(all, all, AllToAllOptions{});
      auto sent = b.isend(in, peer, SendOptions{});
      b.irecv(in, peer, SendOptions{})->wait();
      sent->wait();
    };
    each(0);
    each(1);
    meet(arrived, 2);
    if (r == 0) {
      warm = group_threads();
      threads_warm = threads_now();
    }
    meet(arrived, 4);
    for (int i = 0; i < n; ++i) {
      each(i);
      ops += 5;
      if (r == 0 && i % 100 == 0) most = std::max(most, threads_now());
    }
    meet(arrived, 6);
    if (r == 0) after = group_threads();
  });
  fake<void(bool)>("fake_nccl_call_sleeps")(true);
  CHECK(ops == 2 * 5 * n);
  CHECK(after == warm);  // no group ran on a nonblocking communicator
  CHECK(blocking_connects() == connects_at_start);
  CHECK(most <= threads_warm + 4);  // at most a watchdog more for each channel's twin
}

TEST_CASE("the bench launches its timed iterations back to back and waits once", "[nccl][stub]") {
  // Every event completes 200 us after it is recorded, so every host wait blocks. 200 timed
  // iterations of all_reduce, out of place and in place, on two ranks: the host waits for the
  // checked run, the warm-up, the barriers and the results' exchange, and once per timed run,
  // never per iteration.
  fake<void(int)>("fake_cuda_set_event_delay_us")(200);
  const auto host_syncs = fake<int()>("fake_cuda_host_syncs");
  const int before = host_syncs();
  std::atomic<int> measured{0};
  testing::run_nccl_ranks(2, [&](NcclBackend& b, int) {
    bench::BenchConfig cfg;
    cfg.collective = bench::find_collective("all_reduce");
    cfg.iters = 200;
    const bench::SizeResult r = bench::run_size(b, cfg, 1024);
    for (const auto& p : r.placement) measured += p.measured && p.stats.samples == 200;
  });
  CHECK(measured == 4);
  CHECK(host_syncs() - before < 100);  // 2 ranks x 2 placements x 200 iterations waited for would be 800
}
