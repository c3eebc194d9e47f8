// NcclBackend over a stand-in for the CUDA runtime and NCCL (tests/nccl/fake/fake_cuda.cpp,
// loaded by libdistrun in place of the real libraries through LD_LIBRARY_PATH): the ordering and
// locking of distrun's own calls, checked on any machine. The stand-in moves no data between
// ranks; these tests look at which calls distrun makes, from which thread, and when memory goes.
#include <dirent.h>
#include <dlfcn.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <thread>

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
  // The peer never receives: the stand-in keeps every transfer pending until released. Dropping
  // the Work must not make the legacy default stream wait for it (every later launch and copy,
  // and the abort, would wait behind it), and its memory must stay allocated until it is done.
  fake<void(int)>("fake_cuda_set_event_delay_us")(0);
  const int legacy_before = fake<int()>("fake_cuda_legacy_waits_on_pending")();
  testing::run_nccl_ranks(2, [&](NcclBackend& b, int r) {
    if (r != 0) return;
    fake<void(bool)>("fake_cuda_hold_p2p")(true);
    const void* sent = nullptr;
    {
      Tensor payload = Tensor::zeros({1024}, DType::Float32, Device::cuda(0));
      sent = payload.data();
      b.isend(payload, 1, SendOptions{});  // dropped, and the test's handle goes too
    }
    Tensor t = Tensor::zeros({8}, DType::Float32, Device::cuda(0));
    b.all_reduce(t, AllreduceOptions{});  // a later collective runs
    CHECK(fake<int()>("fake_cuda_legacy_waits_on_pending")() == legacy_before);
    CHECK_FALSE(fake<bool(const void*)>("fake_cuda_was_freed")(sent));
    fake<void(bool)>("fake_cuda_hold_p2p")(false);
    fake<void()>("fake_cuda_release_p2p")();
    Tensor next = Tensor::zeros({4}, DType::Float32, Device::cuda(0));
    b.isend(next, 1, SendOptions{})->wait();  // looks at the channel's unwaited transfers first
    CHECK(fake<bool(const void*)>("fake_cuda_was_freed")(sent));
  });
}
