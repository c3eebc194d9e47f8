// Argument checks of the NCCL backend, made before anything touches a device, so a bad call
// fails with a clear message (and can be tested on a machine without a GPU).
#pragma once
#include <cstddef>
#include <vector>

#include "distrun/backend/types.hpp"
#include "distrun/core/tensor.hpp"

namespace distrun::nccl {

/// Throws BackendError unless `t` lives on CUDA device `device` (NCCL moves device memory only,
/// and only on the communicator's own device).
void check_on_device(const char* op, const Tensor& t, int device);

/// Throws BackendError unless `t` has `expected` elements.
void check_numel(const char* op, const Tensor& t, int64_t expected);

/// Throws BackendError unless `peer` is a rank of a group of `size` other than `self` (or any
/// rank when `self` is -1): the root of a collective, or the peer of a send/recv.
void check_peer(const char* op, int peer, int size, int self = -1);

/// Where every rank's block of an all_to_all starts and how long it is, in elements.
struct AllToAllLayout {
  std::vector<size_t> send_counts, send_offsets, recv_counts, recv_offsets;
};

/// The layout of an all_to_all of `in` into `out` over `size` ranks: equal blocks when both
/// count lists are empty, else the given (uneven) counts, checked against the sizes.
AllToAllLayout all_to_all_layout(const Tensor& in, const Tensor& out, const std::vector<int64_t>& send_counts,
                                 const std::vector<int64_t>& recv_counts, int size);

}  // namespace distrun::nccl

namespace distrun::nccl {

/// Throws BackendError unless `a` and `b` have the same dtype (NCCL takes one type per call).
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);

}  // namespace distrun::nccl
