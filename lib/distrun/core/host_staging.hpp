// Copies between host (pageable) and CUDA memory through a pinned staging buffer of our own.
//
// A copy from pageable memory makes the driver stage it through a small pinned buffer of its own
// with a synchronisation of the default stream per call. Instead, every host<->device copy of a
// Tensor (Tensor::to, copy_from, assign_slice: the scenario runner's and the bench's fills, the
// comm layer's split sizes, results read back) goes through this object: two halves of
// page-locked memory (cudaHostAlloc, portable), allocated once per thread and device, reused call
// after call, freed when the thread ends. Copies are cudaMemcpy2DAsync on the legacy default
// stream, where every other producer of tensor data runs, so the NCCL backend's stream ordering
// (stream_order.hpp: an event on the legacy stream before each launch) covers them unchanged.
// Host to device returns once the host bytes are in the pinned buffer (the DMA may still run, as
// with cudaMemcpy from pageable memory); one half is filled while the other is copied. Device to
// host returns once the bytes are in the destination. An event per half says when it is free.
#pragma once
#include <cstddef>
#include <cstdint>

namespace distrun {

class HostStaging {
 public:
  /// Bytes of each half of the buffer.
  static constexpr size_t kHalfBytes = size_t(4) << 20;

  /// The staging of this thread for CUDA device `device` (made at first use).
  static HostStaging& for_this_thread(int device);

  explicit HostStaging(int device);
  /// Waits for copies still reading the buffer, then frees it (cudaFreeHost).
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  /// `height` rows of `width` bytes from host `src` (row pitch `src_pitch`) to device `dst`.
  void to_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t height);
  /// `height` rows of `width` bytes from device `src` to host `dst`; the bytes are there on return.
  void to_host(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t height);

  /// Half `i` (0 or 1) of the buffer, for tests (cudaPointerGetAttributes says it is pinned).
  const void* half(int i) const { return halves_[i].host; }
  /// Pieces copied through the buffer so far, for tests (a copy that bypassed it adds none).
  uint64_t pieces_copied() const { return pieces_; }

 private:
  struct Half {
    void* host = nullptr;
    void* copied = nullptr;  // cudaEvent_t recorded after the last copy that used this half
    bool pending = false;
  };
  // Blocks until the last copy through `h` is done (the half may then be written or read).
  void wait_free(Half& h);

  int device_;
  Half halves_[2];
  int next_ = 0;  // the half the next piece uses: halves alternate across calls too
  uint64_t pieces_ = 0;
};

}  // namespace distrun
