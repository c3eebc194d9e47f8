#include "distrun/core/host_staging.hpp"

#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "distrun/config.hpp"
#include "distrun/core/error.hpp"
#include "distrun/core/staging_plan.hpp"
#if DISTRUN_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

namespace distrun {

#if DISTRUN_HAVE_NCCL

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw BackendError(std::string(what) + ": " + cudaGetErrorString(err));
}

cudaEvent_t event_of(void* e) { return static_cast<cudaEvent_t>(e); }

// Packs or unpacks one piece between a strided region and a contiguous one (the pinned half).
void copy_rows(char* dst, size_t dst_pitch, const char* src, size_t src_pitch, size_t width, size_t rows) {
  if (dst_pitch == width && src_pitch == width) return void(std::memcpy(dst, src, width * rows));
  for (size_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_pitch, src + r * src_pitch, width);
}

}  // namespace

HostStaging& HostStaging::for_this_thread(int device) {
  // Per thread: ranks run as threads in the tests, and a half must not be shared by two copies.
  // Destroyed when the thread ends (before static objects and the CUDA runtime's own clean-up).
  thread_local std::map<int, std::unique_ptr<HostStaging>> by_device;
  auto& s = by_device[device];
  if (!s) s = std::make_unique<HostStaging>(device);
  return *s;
}

HostStaging::HostStaging(int device) : device_(device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  try {
    for (Half& h : halves_) {
      // Portable: pinned for every device's DMA, whichever device is current later.
      check(cudaHostAlloc(&h.host, kHalfBytes, cudaHostAllocPortable), "cudaHostAlloc (staging buffer)");
      cudaEvent_t e = nullptr;
      // Blocking sync: a host waiting for a half sleeps in the driver instead of spinning.
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync), "cudaEventCreate");
      h.copied = e;
    }
  } catch (...) {
    for (Half& h : halves_) {
      if (h.copied) cudaEventDestroy(event_of(h.copied));
      if (h.host) cudaFreeHost(h.host);
    }
    throw;
  }
}

HostStaging::~HostStaging() {
  for (Half& h : halves_) {
    // A DMA still reading a half must finish before the memory goes back.
    if (h.pending) cudaEventSynchronize(event_of(h.copied));
    cudaEventDestroy(event_of(h.copied));
    cudaFreeHost(h.host);
  }
}

void HostStaging::wait_free(Half& h) {
  if (!h.pending) return;
  check(cudaEventSynchronize(event_of(h.copied)), "cudaEventSynchronize (staging buffer)");
  h.pending = false;
}

void HostStaging::to_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                            size_t height) {
  check(cudaSetDevice(device_), "cudaSetDevice");
  for (const StagingPiece& p : plan_staging(width, height, kHalfBytes)) {
    Half& h = halves_[next_];
    next_ ^= 1;
    wait_free(h);  // the DMA of the piece before last may still read this half
    copy_rows(static_cast<char*>(h.host), p.width, static_cast<const char*>(src) + p.row * src_pitch + p.col, src_pitch,
              p.width, p.rows);
    // Legacy default stream: after every earlier producer, before every consumer that orders
    // itself after it (the NCCL backend's streams, stream_order.hpp).
    check(cudaMemcpy2DAsync(static_cast<char*>(dst) + p.row * dst_pitch + p.col, dst_pitch, h.host, p.width, p.width,
                            p.rows, cudaMemcpyHostToDevice, cudaStreamLegacy),
          "cudaMemcpy2DAsync (host to device)");
    check(cudaEventRecord(event_of(h.copied), cudaStreamLegacy), "cudaEventRecord");
    h.pending = true;
    ++pieces_;
  }
}

void HostStaging::to_host(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t height) {
  check(cudaSetDevice(device_), "cudaSetDevice");
  const std::vector<StagingPiece> pieces = plan_staging(width, height, kHalfBytes);
  std::vector<Half*> used(pieces.size());
  // Piece i+1's DMA runs while the host unpacks piece i.
  auto issue = [&](size_t i) {
    const StagingPiece& p = pieces[i];
    Half& h = halves_[next_];
    next_ ^= 1;
    wait_free(h);
    check(cudaMemcpy2DAsync(h.host, p.width, static_cast<const char*>(src) + p.row * src_pitch + p.col, src_pitch,
                            p.width, p.rows, cudaMemcpyDeviceToHost, cudaStreamLegacy),
          "cudaMemcpy2DAsync (device to host)");
    check(cudaEventRecord(event_of(h.copied), cudaStreamLegacy), "cudaEventRecord");
    h.pending = true;
    used[i] = &h;
    ++pieces_;
  };
  if (!pieces.empty()) issue(0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i + 1 < pieces.size()) issue(i + 1);
    const StagingPiece& p = pieces[i];
    wait_free(*used[i]);
    copy_rows(static_cast<char*>(dst) + p.row * dst_pitch + p.col, dst_pitch, static_cast<const char*>(used[i]->host),
              p.width, p.width, p.rows);
  }
}

#else  // no CUDA in this build: there is no device memory to copy to or from

HostStaging& HostStaging::for_this_thread(int) {
  throw BackendError("pinned host staging: this build of distrun has no CUDA support");
}
HostStaging::HostStaging(int device) : device_(device) {
  throw BackendError("pinned host staging: this build of distrun has no CUDA support");
}
HostStaging::~HostStaging() = default;
void HostStaging::wait_free(Half&) {}
void HostStaging::to_device(void*, size_t, const void*, size_t, size_t, size_t) {}
void HostStaging::to_host(void*, size_t, const void*, size_t, size_t, size_t) {}

#endif

}  // namespace distrun
