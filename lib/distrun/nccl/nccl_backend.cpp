#include "distrun/nccl/nccl_backend.hpp"

#include <algorithm>
#include <cstring>

#include "distrun/core/error.hpp"
#include "distrun/nccl/cuda_device.hpp"
#include "distrun/nccl/cuda_event.hpp"
#include "distrun/nccl/nccl_args.hpp"
#include "distrun/nccl/nccl_check.hpp"
#include "distrun/nccl/nccl_comm.hpp"
#include "distrun/nccl/nccl_types.hpp"
#include "distrun/nccl/nccl_work.hpp"
#include "distrun/nccl/unique_id_exchange.hpp"

namespace distrun {

using nccl::check_numel;
using nccl::check_on_device;
using nccl::check_peer;
using nccl::check_same_dtype;
using nccl::deadline_after;
using nccl::nccl_dtype;

namespace {

char* bytes(Tensor& t) { return static_cast<char*>(t.data()); }
const char* bytes(const Tensor& t) { return static_cast<const char*>(t.data()); }

}  // namespace

NcclBackend::NcclBackend(std::shared_ptr<Store> store, int rank, int size, const NcclBackendOptions& options,
                         std::shared_ptr<Liveness> liveness, std::vector<int> global_ranks)
    : Backend(rank, size, std::move(global_ranks), std::move(liveness), options.timeout), store_(std::move(store)),
      options_(options) {
  // Before anything else: without a device, say so plainly.
  nccl::require_cuda_device(options_.device);
  nccl::check_runtime_version();
  DISTRUN_CUDA_CHECK(cudaSetDevice(options_.device));
  create_stream();
  try {
    try {
      const auto deadline = deadline_after(options_.timeout);
      ncclUniqueId id;
      std::string raw = nccl::exchange_unique_id(
          *store_, 0, rank_, sizeof(id),
          [] {
            ncclUniqueId made;
            DISTRUN_NCCL_CHECK(ncclGetUniqueId(&made));
            return std::string(reinterpret_cast<const char*>(&made), sizeof(made));
          },
          options_.timeout);
      std::memcpy(&id, raw.data(), sizeof(id));
      comm_ = nccl::NcclComm::init(size_, rank_, id, deadline);
    } catch (const std::exception& e) {
      fail("rendezvous", e);  // names rank 0 when it is the one that never published the id
    }
  } catch (...) {
    destroy_stream();  // no destructor runs for a constructor that throws
    throw;
  }
}

NcclBackend::NcclBackend(std::shared_ptr<nccl::NcclComm> comm, int rank, int size, const NcclBackendOptions& options,
                         std::shared_ptr<Liveness> liveness, std::vector<int> global_ranks)
    : Backend(rank, size, std::move(global_ranks), std::move(liveness), options.timeout), options_(options),
      comm_(std::move(comm)) {
  DISTRUN_CUDA_CHECK(cudaSetDevice(options_.device));
  create_stream();
}

NcclBackend::~NcclBackend() {
  cudaSetDevice(options_.device);
  pending_.clear();  // never launched: their peers time out, as they would for a lost rank
  comm_.reset();     // before the stream its work ran on
  destroy_stream();
}

void NcclBackend::destroy_stream() noexcept {
  if (done_) cudaEventDestroy(done_);
  if (stream_) cudaStreamDestroy(stream_);
  done_ = nullptr;
  stream_ = nullptr;
}

void NcclBackend::create_stream() {
  // Non-blocking: the legacy default stream must not serialise against our collectives.
  DISTRUN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DISTRUN_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

void NcclBackend::fail(const char* op, const std::exception& e) {
  // Abort first: the kernels of a collective whose peer is gone would otherwise spin forever.
  if (comm_) comm_->abort();
  raise_failure(std::string("nccl ") + op, e);
}

void NcclBackend::prepare(const char* op) {
  if (comm_->aborted())
    throw BackendError(std::string("backend nccl: ") + op + ": the communicator was aborted after an earlier failure");
  DISTRUN_CUDA_CHECK(cudaSetDevice(options_.device));
}

void NcclBackend::wait_event(cudaEvent_t event, const char* op, std::chrono::milliseconds timeout) {
  try {
    comm_->wait(event, op, deadline_after(timeout));
  } catch (const std::exception& e) {
    fail(op, e);
  }
}

template <typename F>
void NcclBackend::run(const char* op, std::chrono::milliseconds timeout, F&& enqueue) {
  launch_pending();  // sends and receives queued before this call go first, in program order
  prepare(op);
  const auto deadline = deadline_after(timeout);
  try {
    enqueue(deadline);
    DISTRUN_CUDA_CHECK(cudaEventRecord(done_, stream_));
    comm_->wait(done_, op, deadline);
  } catch (const std::exception& e) {
    fail(op, e);
  }
}

void NcclBackend::broadcast(Tensor& tensor, const BroadcastOptions& opts) {
  check_on_device("broadcast", tensor, device());
  check_peer("broadcast (root)", opts.root, size_);
  run("broadcast", timeout_of(opts), [&](auto deadline) {
    comm_->settle(ncclBroadcast(tensor.data(), tensor.data(), size_t(tensor.numel()), nccl_dtype(tensor.dtype()),
                                opts.root, comm_->get(), stream_),
                  "ncclBroadcast", deadline);
  });
}

void NcclBackend::all_reduce(Tensor& tensor, const AllreduceOptions& opts) {
  check_on_device("all_reduce", tensor, device());
  const ncclRedOp_t op = nccl::nccl_reduce_op(opts.op, "all_reduce");
  run("all_reduce", timeout_of(opts), [&](auto deadline) {
    comm_->settle(ncclAllReduce(tensor.data(), tensor.data(), size_t(tensor.numel()), nccl_dtype(tensor.dtype()), op,
                                comm_->get(), stream_),
                  "ncclAllReduce", deadline);
  });
}

void NcclBackend::reduce(Tensor& tensor, const ReduceOptions& opts) {
  check_on_device("reduce", tensor, device());
  check_peer("reduce (root)", opts.root, size_);
  const ncclRedOp_t op = nccl::nccl_reduce_op(opts.op, "reduce");
  run("reduce", timeout_of(opts), [&](auto deadline) {
    comm_->settle(ncclReduce(tensor.data(), tensor.data(), size_t(tensor.numel()), nccl_dtype(tensor.dtype()), op,
                             opts.root, comm_->get(), stream_),
                  "ncclReduce", deadline);
  });
}

void NcclBackend::all_gather(const Tensor& in, Tensor& out, const AllgatherOptions& opts) {
  check_on_device("all_gather", in, device());
  check_on_device("all_gather", out, device());
  check_same_dtype("all_gather", in, out);
  check_numel("all_gather", out, in.numel() * size_);
  run("all_gather", timeout_of(opts), [&](auto deadline) {
    comm_->settle(ncclAllGather(in.data(), out.data(), size_t(in.numel()), nccl_dtype(in.dtype()), comm_->get(),
                                stream_),
                  "ncclAllGather", deadline);
  });
}

void NcclBackend::gather(const Tensor& in, Tensor& out, const GatherOptions& opts) {
  // NCCL has no gather: the root receives a block from every other rank in one group call, as
  // torch's ProcessGroupNCCL does; its own block is a device copy.
  const bool root = rank_ == opts.root;
  check_peer("gather (root)", opts.root, size_);
  check_on_device("gather", in, device());
  if (root) {
    check_on_device("gather", out, device());
    check_same_dtype("gather", in, out);
    check_numel("gather", out, in.numel() * size_);
  }
  const size_t block = in.nbytes();
  const ncclDataType_t dt = nccl_dtype(in.dtype());
  run("gather", timeout_of(opts), [&](auto deadline) {
    if (root)
      DISTRUN_CUDA_CHECK(cudaMemcpyAsync(bytes(out) + size_t(rank_) * block, in.data(), block,
                                         cudaMemcpyDeviceToDevice, stream_));
    DISTRUN_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size_; ++r) {
      if (root && r != rank_)
        DISTRUN_NCCL_CHECK_ASYNC(ncclRecv(bytes(out) + size_t(r) * block, size_t(in.numel()), dt, r, comm_->get(), stream_));
    }
    if (!root) DISTRUN_NCCL_CHECK_ASYNC(ncclSend(in.data(), size_t(in.numel()), dt, opts.root, comm_->get(), stream_));
    comm_->settle(ncclGroupEnd(), "ncclGroupEnd (gather)", deadline);
  });
}

void NcclBackend::scatter(const Tensor& in, Tensor& out, const ScatterOptions& opts) {
  const bool root = rank_ == opts.root;
  check_peer("scatter (root)", opts.root, size_);
  check_on_device("scatter", out, device());
  if (root) {
    check_on_device("scatter", in, device());
    check_same_dtype("scatter", in, out);
    check_numel("scatter", in, out.numel() * size_);
  }
  const size_t block = out.nbytes();
  const ncclDataType_t dt = nccl_dtype(out.dtype());
  run("scatter", timeout_of(opts), [&](auto deadline) {
    if (root)
      DISTRUN_CUDA_CHECK(cudaMemcpyAsync(out.data(), bytes(in) + size_t(rank_) * block, block,
                                         cudaMemcpyDeviceToDevice, stream_));
    DISTRUN_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size_; ++r) {
      if (root && r != rank_)
        DISTRUN_NCCL_CHECK_ASYNC(ncclSend(bytes(in) + size_t(r) * block, size_t(out.numel()), dt, r, comm_->get(), stream_));
    }
    if (!root) DISTRUN_NCCL_CHECK_ASYNC(ncclRecv(out.data(), size_t(out.numel()), dt, opts.root, comm_->get(), stream_));
    comm_->settle(ncclGroupEnd(), "ncclGroupEnd (scatter)", deadline);
  });
}

void NcclBackend::reduce_scatter(const Tensor& in, Tensor& out, const ReduceScatterOptions& opts) {
  check_on_device("reduce_scatter", in, device());
  check_on_device("reduce_scatter", out, device());
  check_same_dtype("reduce_scatter", in, out);
  check_numel("reduce_scatter", in, out.numel() * size_);
  const ncclRedOp_t op = nccl::nccl_reduce_op(opts.op, "reduce_scatter");
  run("reduce_scatter", timeout_of(opts), [&](auto deadline) {
    comm_->settle(ncclReduceScatter(in.data(), out.data(), size_t(out.numel()), nccl_dtype(out.dtype()), op,
                                    comm_->get(), stream_),
                  "ncclReduceScatter", deadline);
  });
}

void NcclBackend::all_to_all(const Tensor& in, Tensor& out, const AllToAllOptions& opts) {
  check_on_device("all_to_all", in, device());
  check_on_device("all_to_all", out, device());
  check_same_dtype("all_to_all", in, out);
  const nccl::AllToAllLayout l = nccl::all_to_all_layout(in, out, opts, size_);
  const size_t elem = in.element_size();
  const ncclDataType_t dt = nccl_dtype(in.dtype());
  const size_t me = size_t(rank_);
  if (l.send_counts[me] != l.recv_counts[me])
    throw BackendError("backend nccl: all_to_all: this rank sends itself " + std::to_string(l.send_counts[me]) +
                       " elements but expects " + std::to_string(l.recv_counts[me]));
  run("all_to_all", timeout_of(opts), [&](auto deadline) {
    if (l.send_counts[me] > 0)
      DISTRUN_CUDA_CHECK(cudaMemcpyAsync(bytes(out) + l.recv_offsets[me] * elem, bytes(in) + l.send_offsets[me] * elem,
                                         l.send_counts[me] * elem, cudaMemcpyDeviceToDevice, stream_));
    DISTRUN_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size_; ++r) {
      const size_t p = size_t(r);
      if (r == rank_) continue;
      if (l.send_counts[p] > 0)
        DISTRUN_NCCL_CHECK_ASYNC(
            ncclSend(bytes(in) + l.send_offsets[p] * elem, l.send_counts[p], dt, r, comm_->get(), stream_));
      if (l.recv_counts[p] > 0)
        DISTRUN_NCCL_CHECK_ASYNC(
            ncclRecv(bytes(out) + l.recv_offsets[p] * elem, l.recv_counts[p], dt, r, comm_->get(), stream_));
    }
    comm_->settle(ncclGroupEnd(), "ncclGroupEnd (all_to_all)", deadline);
  });
}

void NcclBackend::send(const Tensor& tensor, int dst, const SendOptions& opts) { isend(tensor, dst, opts)->wait(); }

void NcclBackend::recv(Tensor& tensor, int src, const SendOptions& opts) { irecv(tensor, src, opts)->wait(); }

std::shared_ptr<Work> NcclBackend::isend(const Tensor& tensor, int dst, const SendOptions& opts) {
  check_on_device("send", tensor, device());
  check_peer("send (destination)", dst, size_, rank_);
  return queue_p2p(true, tensor, dst, opts);
}

std::shared_ptr<Work> NcclBackend::irecv(Tensor& tensor, int src, const SendOptions& opts) {
  check_on_device("recv", tensor, device());
  check_peer("recv (source)", src, size_, rank_);
  return queue_p2p(false, tensor, src, opts);
}

std::shared_ptr<Work> NcclBackend::queue_p2p(bool is_send, const Tensor& tensor, int peer, const SendOptions& opts) {
  const char* op = is_send ? "send" : "recv";
  prepare(op);
  auto event = std::make_shared<nccl::CudaEvent>();
  pending_.push_back({is_send, tensor, peer, event});
  return std::make_shared<nccl::NcclWork>(*this, op, std::move(event), tensor, timeout_of(opts));
}

void NcclBackend::launch_pending() {
  if (pending_.empty()) return;
  std::vector<PendingP2P> ops;
  ops.swap(pending_);
  prepare("send/recv");
  try {
    // One group: NCCL matches and progresses all of them together, whatever their order.
    DISTRUN_NCCL_CHECK(ncclGroupStart());
    for (PendingP2P& p : ops) {
      const size_t count = size_t(p.tensor.numel());
      const ncclDataType_t dt = nccl_dtype(p.tensor.dtype());
      if (p.is_send)
        DISTRUN_NCCL_CHECK_ASYNC(ncclSend(p.tensor.data(), count, dt, p.peer, comm_->get(), stream_));
      else
        DISTRUN_NCCL_CHECK_ASYNC(ncclRecv(p.tensor.data(), count, dt, p.peer, comm_->get(), stream_));
    }
    comm_->settle(ncclGroupEnd(), "ncclGroupEnd (send/recv)", deadline_after(options_.timeout));
    for (PendingP2P& p : ops) p.done->record(stream_);
  } catch (const std::exception& e) {
    fail("send/recv", e);
  }
}

void NcclBackend::barrier(const BarrierOptions& opts) {
  // NCCL has no barrier: a one-element all_reduce, waited for, is one (as in torch).
  prepare("barrier");
  if (!barrier_buf_.defined()) barrier_buf_ = Tensor::zeros({1}, DType::Float32, Device::cuda(device()));
  run("barrier", timeout_of(opts), [&](auto deadline) {
    comm_->settle(ncclAllReduce(barrier_buf_.data(), barrier_buf_.data(), 1, ncclFloat32, ncclSum, comm_->get(), stream_),
                  "ncclAllReduce (barrier)", deadline);
  });
}

std::shared_ptr<Backend> NcclBackend::new_group(const std::vector<int>& ranks) {
  check_group_ranks(ranks);
  launch_pending();
  prepare("new_group");
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  const bool member = it != ranks.end();
  std::shared_ptr<nccl::NcclComm> child;
  try {
    // Every rank of this communicator takes part; non-members pass no colour and get nothing.
    child = comm_->split(member ? 0 : -1, member ? int(it - ranks.begin()) : 0, deadline_after(options_.timeout));
  } catch (const std::exception& e) {
    fail("new_group", e);
  }
  if (!member) return nullptr;
  std::vector<int> globals;
  for (int r : ranks) globals.push_back(global_rank(r));
  return std::shared_ptr<NcclBackend>(
      new NcclBackend(std::move(child), int(it - ranks.begin()), int(ranks.size()), options_, liveness_, globals));
}

}  // namespace distrun
