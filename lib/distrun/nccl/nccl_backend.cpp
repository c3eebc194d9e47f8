#include "distrun/nccl/nccl_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "distrun/core/error.hpp"
#include "distrun/nccl/cuda_device.hpp"
#include "distrun/nccl/cuda_event.hpp"
#include "distrun/nccl/cuda_library.hpp"
#include "distrun/nccl/failure.hpp"
#include "distrun/nccl/nccl_args.hpp"
#include "distrun/nccl/nccl_check.hpp"
#include "distrun/nccl/nccl_comm.hpp"
#include "distrun/nccl/nccl_group.hpp"
#include "distrun/nccl/nccl_types.hpp"
#include "distrun/nccl/stream_order.hpp"
#include "distrun/nccl/nccl_work.hpp"
#include "distrun/nccl/p2p_channel.hpp"
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

// The collectives' communicator is blocking (nccl_comm.hpp): a launch on it must never wait for
// a peer, so NCCL makes every connection a collective needs when the communicator is created
// (bounded there) instead of at its first use. Before NCCL's first communicator, which reads it
// once; a value the user set wins.
void connect_at_creation() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("NCCL_RUNTIME_CONNECT", "0", 0); });
}

}  // namespace

NcclBackend::NcclBackend(std::shared_ptr<Store> store, int rank, int size, const NcclBackendOptions& options,
                         std::shared_ptr<Liveness> liveness, std::vector<int> global_ranks)
    : Backend(rank, size, std::move(global_ranks), std::move(liveness), options.timeout), store_(std::move(store)),
      options_(options) {
  // Before anything else: without NCCL or a device, say so plainly.
  nccl::load_cuda_library(nccl::CudaLibrary::Nccl);
  nccl::require_cuda_device(options_.device);
  nccl::check_runtime_version();
  connect_at_creation();
  DISTRUN_CUDA_CHECK(cudaSetDevice(options_.device));
  create_stream();
  try {
    try {
      const auto deadline = deadline_after(options_.timeout);
      ncclUniqueId id;
      // Numbered per communicator: a second backend over this store must not read the first's id.
      tag_ = std::to_string(nccl::next_comm_sequence(*store_, rank_));
      std::string raw = nccl::exchange_unique_id(
          *store_, nccl::unique_id_key(tag_), rank_, 0, sizeof(id),
          [] {
            ncclUniqueId made;
            DISTRUN_NCCL_CHECK(ncclGetUniqueId(&made));
            return std::string(reinterpret_cast<const char*>(&made), sizeof(made));
          },
          options_.timeout);
      std::memcpy(&id, raw.data(), sizeof(id));
      async_comm_ = nccl::NcclComm::init(size_, rank_, id, deadline);
      comm_ = async_comm_->blocking_twin(rank_, deadline);
      create_channels(deadline);
    } catch (const std::exception& e) {
      fail("rendezvous", e);  // names rank 0 when it is the one that never published the id
    }
  } catch (...) {
    destroy_stream();  // no destructor runs for a constructor that throws
    throw;
  }
}

NcclBackend::NcclBackend(std::shared_ptr<Store> store, std::string tag, std::shared_ptr<nccl::NcclComm> comm, int rank,
                         int size, const NcclBackendOptions& options, std::shared_ptr<Liveness> liveness,
                         std::vector<int> global_ranks)
    : Backend(rank, size, std::move(global_ranks), std::move(liveness), options.timeout), store_(std::move(store)),
      options_(options), async_comm_(std::move(comm)), tag_(std::move(tag)) {
  DISTRUN_CUDA_CHECK(cudaSetDevice(options_.device));
  create_stream();
  try {
    try {
      const auto deadline = deadline_after(options_.timeout);
      comm_ = async_comm_->blocking_twin(rank_, deadline);
      create_channels(deadline);
    } catch (const std::exception& e) {
      fail("new_group", e);
    }
  } catch (...) {
    destroy_stream();
    throw;
  }
}

NcclBackend::~NcclBackend() {
  cudaSetDevice(options_.device);
  // Channels still used by a Work live on in it; the others go now, before the collectives'.
  send_channels_.clear();
  recv_channels_.clear();
  comm_.reset();        // the twin before the parent whose resources it shares
  async_comm_.reset();  // before the stream their work ran on
  destroy_stream();
}

void NcclBackend::create_channels(std::chrono::steady_clock::time_point deadline) {
  // Two channels per peer: ours (we send, we made its id) and its (it sends, it made the id).
  // Every id we make is published before we wait for any, so ranks cannot wait in a circle.
  auto key = [this](int src, int dst) {
    return nccl::unique_id_key(tag_, "p2p/" + std::to_string(src) + "to" + std::to_string(dst));
  };
  auto make_id = [] {
    ncclUniqueId made;
    DISTRUN_NCCL_CHECK(ncclGetUniqueId(&made));
    return std::string(reinterpret_cast<const char*>(&made), sizeof(made));
  };
  auto remaining = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - nccl::Clock::now()));
  };
  std::vector<std::string> send_ids(static_cast<size_t>(size_)), recv_ids(static_cast<size_t>(size_));
  for (int p = 0; p < size_; ++p)
    if (p != rank_)
      send_ids[size_t(p)] =
          nccl::exchange_unique_id(*store_, key(rank_, p), rank_, rank_, sizeof(ncclUniqueId), make_id, remaining());
  for (int p = 0; p < size_; ++p)
    if (p != rank_)
      recv_ids[size_t(p)] =
          nccl::exchange_unique_id(*store_, key(p, rank_), rank_, p, sizeof(ncclUniqueId), make_id, remaining());
  send_channels_.assign(size_t(size_), nullptr);
  recv_channels_.assign(size_t(size_), nullptr);
  auto start = [](const std::string& raw, int me) {
    ncclUniqueId id;
    std::memcpy(&id, raw.data(), sizeof(id));
    auto ch = std::make_shared<nccl::P2PChannel>();
    // Not waited for here: NCCL connects in the background; the first operation waits for it.
    ch->comm = nccl::NcclComm::start(2, me, id);
    ch->peer_in_comm = 1 - me;
    return ch;
  };
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    send_channels_[size_t(p)] = start(send_ids[size_t(p)], 0);  // the sender is rank 0 of its channel
    recv_channels_[size_t(p)] = start(recv_ids[size_t(p)], 1);
  }
  // Connected now, while every rank is here: NCCL connects a peer's channels at their first
  // operation (runtime connect), and a connection needs both sides, so a first isend made while
  // the peer is busy in a collective would wait for it: the very circle the channels break. One
  // element each way, all channels in one group, connects every channel this rank has.
  Tensor probe = Tensor::zeros({2 * int64_t(size_)}, DType::Float32, Device::cuda(device()));
  for (auto* list : {&send_channels_, &recv_channels_})
    for (auto& ch : *list)
      if (ch) ch->comm->ensure_ready("p2p channel set-up", deadline);
  {
    std::vector<std::unique_lock<std::recursive_mutex>> held;
    for (auto* list : {&send_channels_, &recv_channels_})
      for (auto& ch : *list)
        if (ch) held.push_back(ch->comm->hold());
    nccl::NcclGroup group;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      nccl::P2PChannel& out = *send_channels_[size_t(p)];
      nccl::P2PChannel& in = *recv_channels_[size_t(p)];
      DISTRUN_NCCL_CHECK_ASYNC(
          ncclSend(bytes(probe), 1, ncclFloat32, out.peer_in_comm, out.comm->get(), out.stream.get()));
      DISTRUN_NCCL_CHECK_ASYNC(ncclRecv(bytes(probe) + (size_t(size_) + size_t(p)) * sizeof(float), 1, ncclFloat32,
                                        in.peer_in_comm, in.comm->get(), in.stream.get()));
    }
    const ncclResult_t r = group.end();
    if (r != ncclSuccess && r != ncclInProgress) nccl::nccl_check(r, "ncclGroupEnd (p2p channel set-up)");
  }
  for (auto* list : {&send_channels_, &recv_channels_})
    for (auto& ch : *list)
      if (ch) {
        ch->comm->settle(ncclInProgress, "p2p channel set-up", deadline);
        DISTRUN_CUDA_CHECK(cudaEventRecord(ch->produced.get(), ch->stream.get()));
        ch->comm->wait(ch->produced.get(), "p2p channel set-up", deadline);
      }
}

void NcclBackend::destroy_stream() noexcept {
  if (done_) cudaEventDestroy(done_);
  if (produced_) cudaEventDestroy(produced_);
  if (stream_) cudaStreamDestroy(stream_);
  done_ = produced_ = nullptr;
  stream_ = nullptr;
}

void NcclBackend::create_stream() {
  // Non-blocking, so that unrelated default-stream work does not serialise against our
  // collectives; the producers of our inputs are waited for explicitly (stream_order.hpp).
  DISTRUN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // Blocking sync: the host sleeps in the driver while a collective runs (nccl_comm.hpp, wait).
  DISTRUN_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming | cudaEventBlockingSync));
  DISTRUN_CUDA_CHECK(cudaEventCreateWithFlags(&produced_, cudaEventDisableTiming));
}

void NcclBackend::fail(const char* op, const std::exception& e) {
  // Abort first: the kernels of a collective whose peer is gone would otherwise spin forever.
  // The channels too, as torch aborts all of a group's communicators: their Works then fail at
  // once instead of waiting on a peer that is gone.
  if (comm_) comm_->abort();
  if (async_comm_) async_comm_->abort();
  for (auto* list : {&send_channels_, &recv_channels_})
    for (auto& ch : *list)
      if (ch) ch->comm->abort();
  failure_namer()->raise(op, e);
}

std::shared_ptr<const nccl::FailureNamer> NcclBackend::failure_namer() {
  if (!namer_) {
    auto n = std::make_shared<nccl::FailureNamer>();
    n->liveness = liveness_;
    for (int r = 0; r < size_; ++r) n->members.push_back(global_rank(r));
    n->global_rank = global_rank(rank_);
    namer_ = std::move(n);
  }
  return namer_;
}

void* NcclBackend::scratch() {
  if (!scratch_.defined()) scratch_ = Tensor::zeros({1}, DType::Float32, Device::cuda(device()));
  return scratch_.data();
}

void NcclBackend::prepare(const char* op) {
  if (comm_->aborted() || async_comm_->aborted())
    throw BackendError(std::string("backend nccl: ") + op + ": the communicator was aborted after an earlier failure");
  DISTRUN_CUDA_CHECK(cudaSetDevice(options_.device));
}

template <typename F>
void NcclBackend::run(const char* op, std::chrono::milliseconds timeout, nccl::NcclComm& comm, F&& enqueue) {
  prepare(op);
  const auto deadline = deadline_after(timeout);
  try {
    if (timing_ && &comm != comm_.get()) {
      // What the blocking communicator queued in this timed run is waited for first, under its
      // own watchdog: `comm`'s aborts could not end a hung kernel of the other.
      DISTRUN_CUDA_CHECK(cudaEventRecord(done_, stream_));
      comm_->wait(done_, op, deadline);
    }
    {
      auto held = comm.hold();  // no watchdog call on the communicator meanwhile
      nccl::order_after_producers(stream_, produced_);
      enqueue(deadline);
      DISTRUN_CUDA_CHECK(cudaEventRecord(done_, stream_));
    }
    if (!timing_ || &comm != comm_.get()) comm.wait(done_, op, deadline);
  } catch (const std::exception& e) {
    fail(op, e);
  }
}

void NcclBackend::broadcast(Tensor& tensor, const BroadcastOptions& opts) {
  check_on_device("broadcast", tensor, device());
  check_peer("broadcast (root)", opts.root, size_);
  run("broadcast", timeout_of(opts), *comm_, [&](auto deadline) {
    comm_->settle(ncclBroadcast(tensor.data(), tensor.data(), size_t(tensor.numel()), nccl_dtype(tensor.dtype()),
                                opts.root, comm_->get(), stream_),
                  "ncclBroadcast", deadline);
  });
}

void NcclBackend::all_reduce(Tensor& tensor, const AllreduceOptions& opts) {
  check_on_device("all_reduce", tensor, device());
  const ncclRedOp_t op = nccl::nccl_reduce_op(opts.op, "all_reduce");
  run("all_reduce", timeout_of(opts), *comm_, [&](auto deadline) {
    comm_->settle(ncclAllReduce(tensor.data(), tensor.data(), size_t(tensor.numel()), nccl_dtype(tensor.dtype()), op,
                                comm_->get(), stream_),
                  "ncclAllReduce", deadline);
  });
}

void NcclBackend::reduce(Tensor& tensor, const ReduceOptions& opts) {
  check_on_device("reduce", tensor, device());
  check_peer("reduce (root)", opts.root, size_);
  const ncclRedOp_t op = nccl::nccl_reduce_op(opts.op, "reduce");
  run("reduce", timeout_of(opts), *comm_, [&](auto deadline) {
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
  run("all_gather", timeout_of(opts), *comm_, [&](auto deadline) {
    comm_->settle(ncclAllGather(in.data(), out.data(), size_t(in.numel()), nccl_dtype(in.dtype()), comm_->get(),
                                stream_),
                  "ncclAllGather", deadline);
  });
}

void NcclBackend::gather(const Tensor& in, Tensor& out, const GatherOptions& opts) {
  // ncclGather where the NCCL loaded has it (2.28); before, the root receives a block from every
  // other rank in one group call, as torch's ProcessGroupNCCL does, its own block a device copy.
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
  // A non-root's receive buffer is never used, but NCCL_CHECK_POINTERS=1 refuses a null one.
  [[maybe_unused]] void* recv = root ? out.data() : scratch();
  run("gather", timeout_of(opts), *async_comm_, [&](auto deadline) {
#if DISTRUN_NCCL_HAS_NATIVE_ROOTED
    if (nccl::native_gather_scatter_all_to_all())
      return async_comm_->settle(ncclGather(in.data(), recv, size_t(in.numel()), dt, opts.root, async_comm_->get(),
                                            stream_),
                                 "ncclGather", deadline);
#endif
    if (root)
      DISTRUN_CUDA_CHECK(
          cudaMemcpyAsync(bytes(out) + size_t(rank_) * block, in.data(), block, cudaMemcpyDeviceToDevice, stream_));
    nccl::NcclGroup group;
    for (int r = 0; r < size_; ++r) {
      if (root && r != rank_)
        DISTRUN_NCCL_CHECK_ASYNC(
            ncclRecv(bytes(out) + size_t(r) * block, size_t(in.numel()), dt, r, async_comm_->get(), stream_));
    }
    if (!root)
      DISTRUN_NCCL_CHECK_ASYNC(ncclSend(in.data(), size_t(in.numel()), dt, opts.root, async_comm_->get(), stream_));
    async_comm_->settle(group.end(), "ncclGroupEnd (gather)", deadline);
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
  // A non-root's send buffer is never used, but NCCL_CHECK_POINTERS=1 refuses a null one.
  [[maybe_unused]] const void* send = root ? in.data() : scratch();
  run("scatter", timeout_of(opts), *async_comm_, [&](auto deadline) {
#if DISTRUN_NCCL_HAS_NATIVE_ROOTED
    if (nccl::native_gather_scatter_all_to_all())
      return async_comm_->settle(ncclScatter(send, out.data(), size_t(out.numel()), dt, opts.root, async_comm_->get(),
                                             stream_),
                                 "ncclScatter", deadline);
#endif
    if (root)
      DISTRUN_CUDA_CHECK(
          cudaMemcpyAsync(out.data(), bytes(in) + size_t(rank_) * block, block, cudaMemcpyDeviceToDevice, stream_));
    nccl::NcclGroup group;
    for (int r = 0; r < size_; ++r) {
      if (root && r != rank_)
        DISTRUN_NCCL_CHECK_ASYNC(
            ncclSend(bytes(in) + size_t(r) * block, size_t(out.numel()), dt, r, async_comm_->get(), stream_));
    }
    if (!root)
      DISTRUN_NCCL_CHECK_ASYNC(ncclRecv(out.data(), size_t(out.numel()), dt, opts.root, async_comm_->get(), stream_));
    async_comm_->settle(group.end(), "ncclGroupEnd (scatter)", deadline);
  });
}

void NcclBackend::reduce_scatter(const Tensor& in, Tensor& out, const ReduceScatterOptions& opts) {
  check_on_device("reduce_scatter", in, device());
  check_on_device("reduce_scatter", out, device());
  check_same_dtype("reduce_scatter", in, out);
  check_numel("reduce_scatter", in, out.numel() * size_);
  const ncclRedOp_t op = nccl::nccl_reduce_op(opts.op, "reduce_scatter");
  run("reduce_scatter", timeout_of(opts), *comm_, [&](auto deadline) {
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
  [[maybe_unused]] const bool even =
      std::all_of(l.send_counts.begin(), l.send_counts.end(), [&](size_t c) { return c == l.send_counts[0]; }) &&
      l.recv_counts == l.send_counts;
  run("all_to_all", timeout_of(opts), *async_comm_, [&](auto deadline) {
#if DISTRUN_NCCL_HAS_NATIVE_ROOTED
    if (even && nccl::native_gather_scatter_all_to_all())
      return async_comm_->settle(ncclAlltoAll(in.data(), out.data(), l.send_counts[0], dt, async_comm_->get(), stream_),
                                 "ncclAlltoAll", deadline);
#endif
    if (l.send_counts[me] > 0)
      DISTRUN_CUDA_CHECK(cudaMemcpyAsync(bytes(out) + l.recv_offsets[me] * elem, bytes(in) + l.send_offsets[me] * elem,
                                         l.send_counts[me] * elem, cudaMemcpyDeviceToDevice, stream_));
    nccl::NcclGroup group;
    for (int r = 0; r < size_; ++r) {
      const size_t p = size_t(r);
      if (r == rank_) continue;
      if (l.send_counts[p] > 0)
        DISTRUN_NCCL_CHECK_ASYNC(
            ncclSend(bytes(in) + l.send_offsets[p] * elem, l.send_counts[p], dt, r, async_comm_->get(), stream_));
      if (l.recv_counts[p] > 0)
        DISTRUN_NCCL_CHECK_ASYNC(
            ncclRecv(bytes(out) + l.recv_offsets[p] * elem, l.recv_counts[p], dt, r, async_comm_->get(), stream_));
    }
    async_comm_->settle(group.end(), "ncclGroupEnd (all_to_all)", deadline);
  });
}

void NcclBackend::send(const Tensor& tensor, int dst, const SendOptions& opts) { isend(tensor, dst, opts)->wait(); }

void NcclBackend::recv(Tensor& tensor, int src, const SendOptions& opts) { irecv(tensor, src, opts)->wait(); }

std::shared_ptr<Work> NcclBackend::isend(const Tensor& tensor, int dst, const SendOptions& opts) {
  check_on_device("send", tensor, device());
  check_peer("send (destination)", dst, size_, rank_);
  return launch_p2p(true, tensor, dst, opts);
}

std::shared_ptr<Work> NcclBackend::irecv(Tensor& tensor, int src, const SendOptions& opts) {
  check_on_device("recv", tensor, device());
  check_peer("recv (source)", src, size_, rank_);
  return launch_p2p(false, tensor, src, opts);
}

std::shared_ptr<Work> NcclBackend::launch_p2p(bool is_send, const Tensor& tensor, int peer, const SendOptions& opts) {
  const char* op = is_send ? "send" : "recv";
  prepare(op);
  std::shared_ptr<nccl::P2PChannel> ch = (is_send ? send_channels_ : recv_channels_)[size_t(peer)];
  auto event = std::make_shared<nccl::CudaEvent>();
  const auto timeout = timeout_of(opts);
  try {
    const auto deadline = deadline_after(timeout);
    ch->release_completed();
    auto held = ch->comm->hold();
    ch->comm->ensure_ready(is_send ? "send (channel set-up)" : "recv (channel set-up)", deadline);
    nccl::order_after_producers(ch->stream.get(), ch->produced.get());
    const size_t count = size_t(tensor.numel());
    const ncclDataType_t dt = nccl_dtype(tensor.dtype());
    // const_cast: ncclRecv writes into the tensor, whose storage the caller handed us as writable.
    void* data = const_cast<void*>(tensor.data());
    if (is_send)
      ch->comm->settle(ncclSend(data, count, dt, ch->peer_in_comm, ch->comm->get(), ch->stream.get()), "ncclSend",
                       deadline);
    else
      ch->comm->settle(ncclRecv(data, count, dt, ch->peer_in_comm, ch->comm->get(), ch->stream.get()), "ncclRecv",
                       deadline);
    event->record(ch->stream.get());
  } catch (const std::exception& e) {
    ch->comm->abort();
    fail(op, e);
  }
  return std::make_shared<nccl::NcclWork>(failure_namer(), ch, op, std::move(event), tensor, timeout);
}

void NcclBackend::barrier(const BarrierOptions& opts) {
  // NCCL has no barrier: a one-element all_reduce, waited for, is one (as in torch).
  prepare("barrier");
  void* buf = scratch();
  // Waited for in a timed run too: no rank may leave a barrier before everyone entered it.
  const bool timing = std::exchange(timing_, false);
  run("barrier", timeout_of(opts), *comm_, [&](auto deadline) {
    comm_->settle(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm_->get(), stream_), "ncclAllReduce (barrier)",
                  deadline);
  });
  timing_ = timing;
}

void NcclBackend::begin_timed() {
  prepare("timed run");
  timing_ = true;
  marks_used_ = 0;
  mark();  // the start
}

void NcclBackend::mark() {
  if (!timing_) return;
  if (marks_used_ == marks_.size()) marks_.push_back(std::make_unique<nccl::CudaEvent>(true));
  marks_[marks_used_++]->record(stream_);
}

std::vector<double> NcclBackend::end_timed(std::chrono::milliseconds timeout) {
  if (!std::exchange(timing_, false)) return {};  // no timed run began
  const char* op = "timed run";
  try {
    // The last mark follows everything launched on the stream.
    comm_->wait(marks_[marks_used_ - 1]->get(), op, deadline_after(timeout.count() > 0 ? timeout : options_.timeout));
  } catch (const std::exception& e) {
    fail(op, e);
  }
  std::vector<double> us;
  for (size_t i = 1; i < marks_used_; ++i) {
    float ms = 0;
    DISTRUN_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[0]->get(), marks_[i]->get()));
    us.push_back(double(ms) * 1000);
  }
  return us;
}

std::shared_ptr<Backend> NcclBackend::new_group(const std::vector<int>& ranks) {
  check_group_ranks(ranks);
  prepare("new_group");
  // Counted on every rank, members or not: the child's tag is the same on all its members.
  const std::string child_tag = tag_ + ".g" + std::to_string(groups_made_++);
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  const bool member = it != ranks.end();
  std::shared_ptr<nccl::NcclComm> child;
  try {
    // Every rank of this communicator takes part; non-members pass no colour and get nothing.
    child = async_comm_->split(member ? 0 : -1, member ? int(it - ranks.begin()) : 0, deadline_after(options_.timeout));
  } catch (const std::exception& e) {
    fail("new_group", e);
  }
  if (!member) return nullptr;
  std::vector<int> globals;
  for (int r : ranks) globals.push_back(global_rank(r));
  return std::shared_ptr<NcclBackend>(new NcclBackend(store_, child_tag, std::move(child), int(it - ranks.begin()),
                                                      int(ranks.size()), options_, liveness_, globals));
}

}  // namespace distrun
