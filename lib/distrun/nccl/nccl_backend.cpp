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

// The peers a rooted operation (gather, scatter) exchanges data with: every other rank on the
// root, the root elsewhere; none when there is nothing to move.
std::vector<int> rooted_peers(int rank, int root, int size, bool moves_data) {
  std::vector<int> peers;
  for (int r = 0; r < size && moves_data; ++r)
    if (r != rank && (rank == root || r == root)) peers.push_back(r);
  return peers;
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
      std::string raw = nccl::exchange_unique_id(*store_, nccl::unique_id_key(tag_), rank_, 0, sizeof(id),
                                                 nccl::NcclComm::new_unique_id, options_.timeout);
      std::memcpy(&id, raw.data(), sizeof(id));
      async_comm_ = nccl::NcclComm::init(size_, rank_, id, deadline);
      comm_ = async_comm_->blocking_twin(rank_, deadline);
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

std::shared_ptr<nccl::P2PChannel> NcclBackend::channel(bool is_send, int peer) {
  std::shared_ptr<nccl::P2PChannel>& ch = (is_send ? send_channels_ : recv_channels_)[size_t(peer)];
  if (!ch) {
    const int src = is_send ? rank_ : peer, dst = is_send ? peer : rank_;
    ch = std::make_shared<nccl::P2PChannel>(store_,
                                            nccl::unique_id_key(tag_, "p2p/" + std::to_string(src) + "to" +
                                                                          std::to_string(dst)),
                                            is_send, device());
  }
  return ch;
}

void NcclBackend::connect_peers(const char* op, std::vector<int> to, std::vector<int> from,
                                std::chrono::milliseconds timeout) {
  // NCCL connects two ranks for point-to-point at their first send or receive, which needs the
  // peer's; in a blocking launch that wait would be unbounded. So the connections are made
  // here, on the nonblocking communicator, with one element each way (the blocking twin shares
  // its resources, connections included). Every rank sees the same history of gathers,
  // scatters and all_to_alls, so a pair is connected here by both its ends in the same call.
  auto made = [](const std::vector<char>& done) { return [&done](int p) { return done[size_t(p)] != 0; }; };
  to.erase(std::remove_if(to.begin(), to.end(), made(sending_to_)), to.end());
  from.erase(std::remove_if(from.begin(), from.end(), made(receiving_from_)), from.end());
  if (to.empty() && from.empty()) return;
  if (!probe_.defined()) probe_ = Tensor::zeros({2 * int64_t(size_)}, DType::Float32, Device::cuda(device()));
  float* buf = static_cast<float*>(probe_.data());
  run(op, timeout, *async_comm_, [&](auto deadline) {
    nccl::NcclGroup group;
    for (int p : to) DISTRUN_NCCL_CHECK_ASYNC(ncclSend(buf + p, 1, ncclFloat32, p, async_comm_->get(), stream_));
    for (int p : from)
      DISTRUN_NCCL_CHECK_ASYNC(ncclRecv(buf + size_ + p, 1, ncclFloat32, p, async_comm_->get(), stream_));
    async_comm_->settle(group.end(), "ncclGroupEnd (connecting peers)", deadline);
  });
  for (int p : to) sending_to_[size_t(p)] = 1;
  for (int p : from) receiving_from_[size_t(p)] = 1;
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
      if (ch) ch->abort();
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

template <>
void NcclBackend::run_kind<CollectiveKind::Broadcast>(const CollectiveOp& opts) {
  Tensor& tensor = *opts.out;
  check_on_device("broadcast", tensor, device());
  check_peer("broadcast (root)", opts.root, size_);
  run("broadcast", timeout_of(opts), *comm_, [&](auto deadline) {
    comm_->settle(ncclBroadcast(tensor.data(), tensor.data(), size_t(tensor.numel()), nccl_dtype(tensor.dtype()),
                                opts.root, comm_->get(), stream_),
                  "ncclBroadcast", deadline);
  });
}

template <>
void NcclBackend::run_kind<CollectiveKind::AllReduce>(const CollectiveOp& opts) {
  Tensor& tensor = *opts.out;
  check_on_device("all_reduce", tensor, device());
  const ncclRedOp_t op = nccl::nccl_reduce_op(opts.reduce, tensor.dtype(), "all_reduce");
  run("all_reduce", timeout_of(opts), *comm_, [&](auto deadline) {
    comm_->settle(ncclAllReduce(tensor.data(), tensor.data(), size_t(tensor.numel()), nccl_dtype(tensor.dtype()), op,
                                comm_->get(), stream_),
                  "ncclAllReduce", deadline);
  });
}

template <>
void NcclBackend::run_kind<CollectiveKind::Reduce>(const CollectiveOp& opts) {
  Tensor& tensor = *opts.out;
  check_on_device("reduce", tensor, device());
  check_peer("reduce (root)", opts.root, size_);
  const ncclRedOp_t op = nccl::nccl_reduce_op(opts.reduce, tensor.dtype(), "reduce");
  run("reduce", timeout_of(opts), *comm_, [&](auto deadline) {
    comm_->settle(ncclReduce(tensor.data(), tensor.data(), size_t(tensor.numel()), nccl_dtype(tensor.dtype()), op,
                             opts.root, comm_->get(), stream_),
                  "ncclReduce", deadline);
  });
}

template <>
void NcclBackend::run_kind<CollectiveKind::AllGather>(const CollectiveOp& opts) {
  const Tensor& in = *opts.in;
  Tensor& out = *opts.out;
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

template <>
void NcclBackend::run_kind<CollectiveKind::Gather>(const CollectiveOp& opts) {
  const Tensor& in = *opts.in;
  Tensor& out = *opts.out;
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
  const std::vector<int> peers = rooted_peers(rank_, opts.root, size_, block > 0);
  connect_peers("gather", root ? std::vector<int>{} : peers, root ? peers : std::vector<int>{}, timeout_of(opts));
  run("gather", timeout_of(opts), *comm_, [&](auto deadline) {
#if DISTRUN_NCCL_HAS_NATIVE_ROOTED
    if (nccl::native_gather_scatter_all_to_all())
      return comm_->settle(ncclGather(in.data(), recv, size_t(in.numel()), dt, opts.root, comm_->get(), stream_),
                           "ncclGather", deadline);
#endif
    if (root)
      DISTRUN_CUDA_CHECK(
          cudaMemcpyAsync(bytes(out) + size_t(rank_) * block, in.data(), block, cudaMemcpyDeviceToDevice, stream_));
    nccl::NcclGroup group;
    for (int r = 0; r < size_; ++r) {
      if (root && r != rank_)
        DISTRUN_NCCL_CHECK_ASYNC(
            ncclRecv(bytes(out) + size_t(r) * block, size_t(in.numel()), dt, r, comm_->get(), stream_));
    }
    if (!root) DISTRUN_NCCL_CHECK_ASYNC(ncclSend(in.data(), size_t(in.numel()), dt, opts.root, comm_->get(), stream_));
    comm_->settle(group.end(), "ncclGroupEnd (gather)", deadline);
  });
}

template <>
void NcclBackend::run_kind<CollectiveKind::Scatter>(const CollectiveOp& opts) {
  const Tensor& in = *opts.in;
  Tensor& out = *opts.out;
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
  const std::vector<int> peers = rooted_peers(rank_, opts.root, size_, block > 0);
  connect_peers("scatter", root ? peers : std::vector<int>{}, root ? std::vector<int>{} : peers, timeout_of(opts));
  run("scatter", timeout_of(opts), *comm_, [&](auto deadline) {
#if DISTRUN_NCCL_HAS_NATIVE_ROOTED
    if (nccl::native_gather_scatter_all_to_all())
      return comm_->settle(ncclScatter(send, out.data(), size_t(out.numel()), dt, opts.root, comm_->get(), stream_),
                           "ncclScatter", deadline);
#endif
    if (root)
      DISTRUN_CUDA_CHECK(
          cudaMemcpyAsync(out.data(), bytes(in) + size_t(rank_) * block, block, cudaMemcpyDeviceToDevice, stream_));
    nccl::NcclGroup group;
    for (int r = 0; r < size_; ++r) {
      if (root && r != rank_)
        DISTRUN_NCCL_CHECK_ASYNC(
            ncclSend(bytes(in) + size_t(r) * block, size_t(out.numel()), dt, r, comm_->get(), stream_));
    }
    if (!root)
      DISTRUN_NCCL_CHECK_ASYNC(ncclRecv(out.data(), size_t(out.numel()), dt, opts.root, comm_->get(), stream_));
    comm_->settle(group.end(), "ncclGroupEnd (scatter)", deadline);
  });
}

template <>
void NcclBackend::run_kind<CollectiveKind::ReduceScatter>(const CollectiveOp& opts) {
  const Tensor& in = *opts.in;
  Tensor& out = *opts.out;
  check_on_device("reduce_scatter", in, device());
  check_on_device("reduce_scatter", out, device());
  check_same_dtype("reduce_scatter", in, out);
  check_numel("reduce_scatter", in, out.numel() * size_);
  const ncclRedOp_t op = nccl::nccl_reduce_op(opts.reduce, in.dtype(), "reduce_scatter");
  run("reduce_scatter", timeout_of(opts), *comm_, [&](auto deadline) {
    comm_->settle(ncclReduceScatter(in.data(), out.data(), size_t(out.numel()), nccl_dtype(out.dtype()), op,
                                    comm_->get(), stream_),
                  "ncclReduceScatter", deadline);
  });
}

template <>
void NcclBackend::run_kind<CollectiveKind::AllToAll>(const CollectiveOp& opts) {
  const Tensor& in = *opts.in;
  Tensor& out = *opts.out;
  check_on_device("all_to_all", in, device());
  check_on_device("all_to_all", out, device());
  check_same_dtype("all_to_all", in, out);
  const nccl::AllToAllLayout l = nccl::all_to_all_layout(in, out, opts.send_counts, opts.recv_counts, size_);
  const size_t elem = in.element_size();
  const ncclDataType_t dt = nccl_dtype(in.dtype());
  const size_t me = size_t(rank_);
  if (l.send_counts[me] != l.recv_counts[me])
    throw BackendError("backend nccl: all_to_all: this rank sends itself " + std::to_string(l.send_counts[me]) +
                       " elements but expects " + std::to_string(l.recv_counts[me]));
  [[maybe_unused]] const bool even =
      std::all_of(l.send_counts.begin(), l.send_counts.end(), [&](size_t c) { return c == l.send_counts[0]; }) &&
      l.recv_counts == l.send_counts;
  std::vector<int> to, from;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (l.send_counts[size_t(r)] > 0) to.push_back(r);
    if (l.recv_counts[size_t(r)] > 0) from.push_back(r);
  }
  connect_peers("all_to_all", to, from, timeout_of(opts));
  run("all_to_all", timeout_of(opts), *comm_, [&](auto deadline) {
#if DISTRUN_NCCL_HAS_NATIVE_ROOTED
    if (even && nccl::native_gather_scatter_all_to_all())
      return comm_->settle(ncclAlltoAll(in.data(), out.data(), l.send_counts[0], dt, comm_->get(), stream_),
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
            ncclSend(bytes(in) + l.send_offsets[p] * elem, l.send_counts[p], dt, r, comm_->get(), stream_));
      if (l.recv_counts[p] > 0)
        DISTRUN_NCCL_CHECK_ASYNC(
            ncclRecv(bytes(out) + l.recv_offsets[p] * elem, l.recv_counts[p], dt, r, comm_->get(), stream_));
    }
    comm_->settle(group.end(), "ncclGroupEnd (all_to_all)", deadline);
  });
}

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
  std::shared_ptr<nccl::P2PChannel> ch = channel(is_send, peer);
  auto p = std::make_shared<nccl::P2POp>();
  p->is_send = is_send;
  p->tensor = tensor;
  const auto timeout = timeout_of(opts);
  p->deadline = deadline_after(timeout);
  try {
    ch->submit(p);
  } catch (const std::exception& e) {
    ch->abort();
    fail(op, e);
  }
  return std::make_shared<nccl::NcclWork>(failure_namer(), std::move(ch), op, std::move(p), timeout);
}

template <>
void NcclBackend::run_kind<CollectiveKind::Barrier>(const CollectiveOp& opts) {
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

void NcclBackend::run(const CollectiveOp& op) {
  using K = CollectiveKind;
  switch (op.kind) {
    case K::Broadcast: return run_kind<K::Broadcast>(op);
    case K::AllReduce: return run_kind<K::AllReduce>(op);
    case K::Reduce: return run_kind<K::Reduce>(op);
    case K::AllGather: return run_kind<K::AllGather>(op);
    case K::Gather: return run_kind<K::Gather>(op);
    case K::Scatter: return run_kind<K::Scatter>(op);
    case K::ReduceScatter: return run_kind<K::ReduceScatter>(op);
    case K::AllToAll: return run_kind<K::AllToAll>(op);
    case K::Barrier: return run_kind<K::Barrier>(op);
  }
  unsupported(collective_name(op.kind));
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
