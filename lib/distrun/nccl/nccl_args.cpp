#include "distrun/nccl/nccl_args.hpp"

#include <string>

#include "distrun/core/error.hpp"

namespace distrun::nccl {

void check_on_device(const char* op, const Tensor& t, int device) {
  if (!t.defined()) throw BackendError(std::string("backend nccl: ") + op + ": tensor is undefined");
  if (!(t.device() == Device::cuda(device)))
    throw BackendError(std::string("backend nccl: ") + op + ": tensor is on " + t.device().str() +
                       ", but this backend works on " + Device::cuda(device).str() +
                       " (NCCL moves device memory only; use device: cuda, or backend gloo for CPU tensors)");
}

void check_numel(const char* op, const Tensor& t, int64_t expected) {
  if (t.numel() != expected)
    throw BackendError(std::string("backend nccl: ") + op + ": buffer has " + std::to_string(t.numel()) +
                       " elements, expected " + std::to_string(expected));
}

void check_peer(const char* op, int peer, int size, int self) {
  if (peer < 0 || peer >= size || peer == self)
    throw BackendError(std::string("backend nccl: ") + op + ": bad rank " + std::to_string(peer) + " (group of " +
                       std::to_string(size) + (self >= 0 ? ", this rank is " + std::to_string(self) : "") + ")");
}

AllToAllLayout all_to_all_layout(const Tensor& in, const Tensor& out, const std::vector<int64_t>& send_counts,
                                 const std::vector<int64_t>& recv_counts, int size) {
  AllToAllLayout l;
  const bool even = send_counts.empty() && recv_counts.empty();
  if (even) {
    check_numel("all_to_all", out, in.numel());
    if (in.numel() % size != 0)
      throw BackendError("backend nccl: all_to_all: " + std::to_string(in.numel()) + " elements do not split into " +
                         std::to_string(size) + " equal blocks");
    l.send_counts.assign(size_t(size), size_t(in.numel() / size));
    l.recv_counts = l.send_counts;
  } else {
    if (int(send_counts.size()) != size || int(recv_counts.size()) != size)
      throw BackendError("backend nccl: all_to_all: send/recv counts need one entry per rank (" + std::to_string(size) +
                         ")");
    int64_t s = 0, r = 0;
    for (int i = 0; i < size; ++i) {
      if (send_counts[size_t(i)] < 0 || recv_counts[size_t(i)] < 0)
        throw BackendError("backend nccl: all_to_all: negative count for rank " + std::to_string(i));
      s += send_counts[size_t(i)];
      r += recv_counts[size_t(i)];
      l.send_counts.push_back(size_t(send_counts[size_t(i)]));
      l.recv_counts.push_back(size_t(recv_counts[size_t(i)]));
    }
    check_numel("all_to_all (sum of send counts)", in, s);
    check_numel("all_to_all (sum of recv counts)", out, r);
  }
  size_t so = 0, ro = 0;
  for (int i = 0; i < size; ++i) {
    l.send_offsets.push_back(so);
    l.recv_offsets.push_back(ro);
    so += l.send_counts[size_t(i)];
    ro += l.recv_counts[size_t(i)];
  }
  return l;
}

}  // namespace distrun::nccl

namespace distrun::nccl {

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw BackendError(std::string("backend nccl: ") + op + ": input is " + dtype_name(a.dtype()) + " but output is " +
                       dtype_name(b.dtype()));
}

}  // namespace distrun::nccl
