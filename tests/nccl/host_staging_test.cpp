// Host<->device copies go through this thread's pinned staging buffer (host_staging.hpp), which
// needs a CUDA device: part of nccl.gpu.collectives (skipped without one). The plan of pieces is
// checked without a device in distrun_unit_core.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "distrun/core/host_staging.hpp"
#include "distrun/core/tensor.hpp"
#include "distrun/nccl/nccl_backend.hpp"
#include "distrun/store/hash_store.hpp"

using namespace distrun;

namespace {

// cudaMemoryTypeHost for page-locked memory CUDA knows; cudaMemoryTypeUnregistered for pageable.
cudaMemoryType memory_type(const void* p) {
  cudaPointerAttributes a{};
  REQUIRE(cudaPointerGetAttributes(&a, p) == cudaSuccess);
  return a.type;
}

Tensor host_iota(int64_t n, int64_t salt) {
  Tensor h = Tensor::empty({n}, DType::Int32);
  for (int64_t i = 0; i < n; ++i) h.data_as<int32_t>()[i] = int32_t(i * 7 + salt);
  return h;
}

}  // namespace

TEST_CASE("host to device copies go through a pinned staging buffer, reused", "[nccl][gpu][staging]") {
  // Defect 8: staging used pageable memory (cudaMemcpy2D from a plain host buffer). A copy that
  // bypasses the staging buffer adds no piece; a buffer that is not page-locked is reported as
  // unregistered by CUDA.
  HostStaging& s = HostStaging::for_this_thread(0);
  const uint64_t before = s.pieces_copied();
  Tensor d = host_iota(1000, 1).to(Device::cuda(0));
  CHECK(s.pieces_copied() == before + 1);
  Tensor back = d.to(Device::cpu());
  CHECK(s.pieces_copied() == before + 2);
  CHECK(back.data_as<int32_t>()[999] == 999 * 7 + 1);
  for (int i = 0; i < 2; ++i) CHECK(memory_type(s.half(i)) == cudaMemoryTypeHost);
  // The check can fail: pageable memory is not pinned.
  std::vector<char> pageable(64);
  CHECK(memory_type(pageable.data()) == cudaMemoryTypeUnregistered);
  // The same buffer, call after call (cached, not allocated per copy).
  const void* h0 = s.half(0);
  for (int i = 0; i < 3; ++i) (void)host_iota(10, i).to(Device::cuda(0));
  CHECK(s.half(0) == h0);
  CHECK(&HostStaging::for_this_thread(0) == &s);
}

TEST_CASE("staged copies of many pieces, back to back, keep every byte", "[nccl][gpu][staging]") {
  // A half refilled before its DMA finished would show as the next tensor's values in this one.
  const int64_t n = int64_t(HostStaging::kHalfBytes / 4) * 5 + 13;  // five halves and a bit
  std::vector<Tensor> dev;
  for (int64_t k = 0; k < 4; ++k) dev.push_back(host_iota(n, k * 1000003).to(Device::cuda(0)));
  for (int64_t k = 0; k < 4; ++k) {
    Tensor h = dev[size_t(k)].to(Device::cpu());
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += h.data_as<int32_t>()[i] != int32_t(i * 7 + k * 1000003);
    CHECK(wrong == 0);
  }
}

TEST_CASE("staged strided copies: narrow and wide rows, both directions", "[nccl][gpu][staging]") {
  // Column slices are strided copies (cudaMemcpy2DAsync from the packed half); rows wider than
  // a half are cut inside the row.
  for (int64_t cols : {int64_t(6), int64_t(HostStaging::kHalfBytes / 4 + 5)}) {
    const int64_t rows = cols > 6 ? 3 : 100000;
    Tensor full = Tensor::empty({rows, cols}, DType::Int32);
    for (int64_t i = 0; i < full.numel(); ++i) full.data_as<int32_t>()[i] = int32_t(i);
    Tensor dev = Tensor::zeros({rows, cols}, DType::Int32, Device::cuda(0));
    Tensor right = full.slice(1, 2, cols - 2);     // host, packed
    dev.assign_slice(1, 2, right);                 // host -> device, strided destination
    Tensor back_cols = dev.slice(1, 2, cols - 2);  // device, packed on the device
    Tensor h = back_cols.to(Device::cpu());
    int64_t wrong = 0;
    for (int64_t i = 0; i < h.numel(); ++i) wrong += h.data_as<int32_t>()[i] != right.data_as<int32_t>()[i];
    CHECK(wrong == 0);
    Tensor host_dst = Tensor::zeros({rows, cols}, DType::Int32);
    host_dst.assign_slice(1, 2, back_cols);  // device -> host, strided destination
    wrong = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int32_t want = c < 2 ? 0 : int32_t(r * cols + c);
        wrong += host_dst.data_as<int32_t>()[r * cols + c] != want;
      }
    CHECK(wrong == 0);
  }
}

TEST_CASE("a staged copy, then a collective at once: NCCL's stream waits for the DMA", "[nccl][gpu][staging]") {
  // Defect 1 with the asynchronous staged copy: the host returns before the DMA is done, so the
  // backend's stream must still wait for it (stream_order.hpp). One rank is enough: a broadcast
  // from rank 0 copies nothing, an all_reduce of one rank reads and writes the buffer.
  NcclBackendOptions o;
  o.timeout = std::chrono::milliseconds(60000);
  NcclBackend b(std::make_shared<HashStore>(), 0, 1, o);
  const int64_t n = int64_t(64) << 20;  // 256 MB of int32
  for (int round = 0; round < 3; ++round) {
    Tensor d = host_iota(n, round).to(Device::cuda(0));
    b.all_reduce(d, AllreduceOptions{});
    Tensor h = d.to(Device::cpu());
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i += 4093) wrong += h.data_as<int32_t>()[i] != int32_t(i * 7 + round);
    wrong += h.data_as<int32_t>()[n - 1] != int32_t((n - 1) * 7 + round);
    CHECK(wrong == 0);
  }
}
