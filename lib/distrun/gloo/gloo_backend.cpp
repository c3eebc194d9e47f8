#include "distrun/gloo/gloo_backend.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "distrun/backend/reduce_kernels.hpp"
#include "distrun/core/error.hpp"
#include "distrun/gloo/gloo_store.hpp"
#include "distrun/gloo/cma.hpp"
#include "distrun/gloo/tcp_transport.hpp"

namespace distrun {

namespace {

// Slots for point-to-point traffic, apart from the tags the collectives use.
constexpr uint64_t kP2PSlot = 0x5e0d000000000000ull;

// Host copies of CUDA tensors: Gloo only moves host memory.
Tensor host(const Tensor& t) { return t.device().is_cuda() ? t.to(Device::cpu()) : t; }
void copy_back(Tensor& dst, const Tensor& h) {
  if (dst.device().is_cuda()) dst.copy_from(h);
}

void check_numel(const char* op, const Tensor& t, int64_t expected) {
  if (t.numel() != expected)
    throw BackendError(std::string(op) + ": buffer has " + std::to_string(t.numel()) + " elements, expected " +
                       std::to_string(expected));
}

class GlooWork : public Work {
 public:
  GlooWork(GlooBackend& backend, const char* op, std::unique_ptr<gloo::transport::UnboundBuffer> buf, Tensor keep,
           Tensor device_target, bool is_send, std::chrono::milliseconds timeout)
      : backend_(backend), op_(op), buf_(std::move(buf)), keep_(std::move(keep)),
        target_(std::move(device_target)), is_send_(is_send), timeout_(timeout) {}

  void wait(std::chrono::milliseconds timeout) override {
    if (done_) return;
    auto t = timeout.count() > 0 ? timeout : timeout_;
    const auto start = std::chrono::steady_clock::now();
    const std::string late = std::string(op_) + ": timed out after " + std::to_string(t.count()) + " ms";
    try {
      bool ok = is_send_ ? buf_->waitSend(t) : buf_->waitRecv(nullptr, t);
      if (!ok) throw TimeoutError(late);
    } catch (const Error& e) {
      backend_.fail(op_, e);
    } catch (const std::exception& e) {
      // As GlooBackend::guarded: Gloo's exception does not say "timeout"; the clock does.
      if (std::chrono::steady_clock::now() - start >= t) backend_.fail(op_, TimeoutError(late + " [" + e.what() + "]"));
      backend_.fail(op_, e);
    }
    if (target_.defined()) target_.copy_from(keep_);
    done_ = true;
  }
  bool is_completed() override { return done_; }

 private:
  GlooBackend& backend_;
  const char* op_;
  std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
  Tensor keep_, target_;
  bool is_send_;
  std::chrono::milliseconds timeout_;
  bool done_ = false;
};

}  // namespace

GlooBackend::GlooBackend(std::shared_ptr<Store> store, int rank, int size, const GlooBackendOptions& options,
                         std::shared_ptr<Liveness> liveness, std::vector<int> global_ranks,
                         std::shared_ptr<gloo::transport::Device> device)
    : Backend(rank, size, std::move(global_ranks), std::move(liveness), options.timeout), store_(std::move(store)),
      options_(options), device_(std::move(device)) {
  if (!device_) {
    gloo::transport::tcp::attr attr;
    if (!options_.iface.empty())
      attr.iface = options_.iface;
    else
      attr.hostname = options_.hostname.empty() ? "127.0.0.1" : options_.hostname;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw ConfigError("gloo: cannot use " + (attr.iface.empty() ? "address " + attr.hostname : "interface " + attr.iface) +
                        ": " + e.what());
    }
  }
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(options_.timeout);
  GlooStoreAdapter adapter(std::make_shared<PrefixStore>("gloo", store_));
  try {
    ctx->connectFullMesh(adapter, device_);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("rendezvous", e);
  }
  context_ = ctx;
  std::unique_ptr<CmaTransport> shm;
  try {
    if (options_.transport != GlooTransport::Tcp)
      shm = CmaTransport::create(context_, *std::make_shared<PrefixStore>("cma", store_), rank_, size_,
                                 [this] { return next_tag_++; }, global_ranks_);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("rendezvous", e);
  }
  // Every member reached the same verdict in create(), so all of them throw or none.
  if (!shm && size_ > 1 && options_.transport == GlooTransport::SharedMemory)
    throw BackendError("DISTRUN_TRANSPORT=shm: the members of this group cannot read each other's memory "
                       "(other hosts, other PID namespaces, or ptrace restrictions)");
  if (shm)
    transport_ = std::move(shm);
  else
    transport_ = std::make_unique<TcpTransport>(context_, rank_, size_, global_ranks_, options_.allreduce_algorithm,
                                                [this] { return next_tag_++; });
}

GlooBackend::~GlooBackend() = default;

void GlooBackendOptions::read_env() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  const std::string t = env("DISTRUN_TRANSPORT");
  if (t == "shm")
    transport = GlooTransport::SharedMemory;
  else if (t == "tcp" || (t.empty() && env("DISTRUN_CMA") == "0"))
    transport = GlooTransport::Tcp;
  else if (t.empty() || t == "auto")
    transport = GlooTransport::Auto;
  else
    throw ConfigError("DISTRUN_TRANSPORT='" + t + "': expected auto, shm or tcp");
  const std::string a = env("DISTRUN_ALLREDUCE_ALGO");
  if (a == "ring")
    allreduce_algorithm = AllreduceAlgorithm::Ring;
  else if (a.empty() || a == "gloo")
    allreduce_algorithm = AllreduceAlgorithm::Gloo;
  else
    throw ConfigError("DISTRUN_ALLREDUCE_ALGO='" + a + "': expected ring or gloo");
}

std::string GlooBackend::transport_name() const { return transport_->name(); }

void GlooBackend::fail(const char* op, const std::exception& e) { raise_failure(op, e); }

Intent GlooBackend::intent(CollectiveKind kind, DType dtype, uint64_t bytes, int root, std::optional<ReduceOp> op) {
  Intent i;
  i.kind = kind;
  i.dtype = uint32_t(dtype);
  i.op = op ? uint32_t(*op) : 0xff;
  i.root = root;
  i.bytes = bytes;
  return i;
}

template <typename F>
void GlooBackend::guarded(const char* op, std::chrono::milliseconds timeout, F&& f) {
  const auto start = std::chrono::steady_clock::now();
  try {
    f();
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    fail(op, e);
  } catch (const std::exception& e) {
    // Gloo throws one exception type for a timeout and a broken pair alike; the fact that
    // tells them apart is whether the deadline has passed.
    if (std::chrono::steady_clock::now() - start >= timeout)
      fail(op, TimeoutError("timed out after " + std::to_string(timeout.count()) + " ms [" + e.what() + "]"));
    fail(op, e);
  }
}

void GlooBackend::broadcast(Tensor& tensor, const BroadcastOptions& opts) {
  Tensor h = host(tensor);
  Intent want = intent(CollectiveKind::Broadcast, h.dtype(), h.nbytes(), opts.root);
  guarded("broadcast", timeout_of(opts), [&] { transport_->broadcast(want, h.data(), timeout_of(opts)); });
  copy_back(tensor, h);
}

void GlooBackend::all_reduce(Tensor& tensor, const AllreduceOptions& opts) {
  Tensor h = host(tensor);
  ReduceFn fn = reduce_kernel(h.dtype(), opts.op);
  Intent want = intent(CollectiveKind::AllReduce, h.dtype(), h.nbytes(), -1, opts.op);
  guarded("all_reduce", timeout_of(opts), [&] {
    transport_->all_reduce(want, h.data(), h.element_size(), fn, timeout_of(opts));
  });
  if (opts.op == ReduceOp::Avg) divide_by(h, size_);
  copy_back(tensor, h);
}


void GlooBackend::reduce(Tensor& tensor, const ReduceOptions& opts) {
  Tensor h = host(tensor);
  ReduceFn fn = reduce_kernel(h.dtype(), opts.op);
  Intent want = intent(CollectiveKind::Reduce, h.dtype(), h.nbytes(), opts.root, opts.op);
  guarded("reduce", timeout_of(opts),
          [&] { transport_->reduce(want, h.data(), h.element_size(), fn, timeout_of(opts)); });
  if (opts.op == ReduceOp::Avg && rank_ == opts.root) divide_by(h, size_);
  copy_back(tensor, h);
}

void GlooBackend::all_gather(const Tensor& in, Tensor& out, const AllgatherOptions& opts) {
  check_numel("all_gather", out, in.numel() * size_);
  Tensor hi = host(in), ho = host(out);
  Intent want = intent(CollectiveKind::AllGather, hi.dtype(), hi.nbytes());
  guarded("all_gather", timeout_of(opts), [&] { transport_->all_gather(want, hi.data(), ho.data(), timeout_of(opts)); });
  copy_back(out, ho);
}

void GlooBackend::gather(const Tensor& in, Tensor& out, const GatherOptions& opts) {
  const bool root = rank_ == opts.root;
  if (root) check_numel("gather", out, in.numel() * size_);
  Tensor hi = host(in), ho = root ? host(out) : Tensor();
  Intent want = intent(CollectiveKind::Gather, hi.dtype(), hi.nbytes(), opts.root);
  guarded("gather", timeout_of(opts),
          [&] { transport_->gather(want, hi.data(), root ? ho.data() : nullptr, timeout_of(opts)); });
  if (root) copy_back(out, ho);
}

void GlooBackend::scatter(const Tensor& in, Tensor& out, const ScatterOptions& opts) {
  const bool root = rank_ == opts.root;
  if (root) check_numel("scatter", in, out.numel() * size_);
  Tensor hi = root ? host(in) : Tensor(), ho = host(out);
  Intent want = intent(CollectiveKind::Scatter, ho.dtype(), ho.nbytes(), opts.root);
  guarded("scatter", timeout_of(opts),
          [&] { transport_->scatter(want, root ? hi.data() : nullptr, ho.data(), timeout_of(opts)); });
  copy_back(out, ho);
}

void GlooBackend::reduce_scatter(const Tensor& in, Tensor& out, const ReduceScatterOptions& opts) {
  check_numel("reduce_scatter", in, out.numel() * size_);
  ReduceFn fn = reduce_kernel(in.dtype(), opts.op);
  const Tensor hin = host(in);
  Tensor hout = host(out);
  const size_t block = hout.nbytes();
  if (size_ == 1) {
    std::memcpy(hout.data(), hin.data(), block);
  } else {
    Intent want = intent(CollectiveKind::ReduceScatter, hout.dtype(), block, -1, opts.op);
    guarded("reduce_scatter", timeout_of(opts), [&] {
      transport_->reduce_scatter(want, hin.data(), hout.data(), hout.element_size(), fn, timeout_of(opts));
    });
  }
  if (opts.op == ReduceOp::Avg) divide_by(hout, size_);
  copy_back(out, hout);
}

void GlooBackend::all_to_all(const Tensor& in, Tensor& out, const AllToAllOptions& opts) {
  Tensor hi = host(in), ho = host(out);
  const bool even = opts.send_counts.empty() && opts.recv_counts.empty();
  if (even) {
    check_numel("all_to_all", out, in.numel());
    if (in.numel() % size_ != 0)
      throw BackendError("all_to_all: " + std::to_string(in.numel()) + " elements do not split into " +
                         std::to_string(size_) + " equal blocks");
  } else {
    if (int(opts.send_counts.size()) != size_ || int(opts.recv_counts.size()) != size_)
      throw BackendError("all_to_all: send/recv counts need one entry per rank");
    int64_t s = 0, r = 0;
    for (int i = 0; i < size_; ++i) s += opts.send_counts[size_t(i)], r += opts.recv_counts[size_t(i)];
    check_numel("all_to_all (send counts)", in, s);
    check_numel("all_to_all (recv counts)", out, r);
  }
  Intent want = intent(CollectiveKind::AllToAll, hi.dtype(), 0);
  const size_t es = hi.element_size();
  size_t at = 0;
  for (int j = 0; j < size_; ++j) {
    const size_t send = even ? hi.nbytes() / size_t(size_) : size_t(opts.send_counts[size_t(j)]) * es;
    want.send_offset.push_back(at);
    want.send_bytes.push_back(send);
    at += send;
    want.recv_bytes.push_back(even ? ho.nbytes() / size_t(size_) : size_t(opts.recv_counts[size_t(j)]) * es);
  }
  guarded("all_to_all", timeout_of(opts), [&] { transport_->all_to_all(want, hi.data(), ho.data(), timeout_of(opts)); });
  copy_back(out, ho);
}

void GlooBackend::send(const Tensor& tensor, int dst, const SendOptions& opts) { isend(tensor, dst, opts)->wait(); }

void GlooBackend::recv(Tensor& tensor, int src, const SendOptions& opts) { irecv(tensor, src, opts)->wait(); }

std::shared_ptr<Work> GlooBackend::isend(const Tensor& tensor, int dst, const SendOptions& opts) {
  if (dst < 0 || dst >= size_ || dst == rank_) throw BackendError("send: bad destination rank " + std::to_string(dst));
  Tensor h = host(tensor);
  std::unique_ptr<gloo::transport::UnboundBuffer> buf;
  guarded("send", timeout_of(opts), [&] {
    buf = context_->createUnboundBuffer(h.data(), h.nbytes());
    buf->send(dst, kP2PSlot | uint32_t(opts.tag));
  });
  return std::make_shared<GlooWork>(*this, "send", std::move(buf), h, Tensor(), true, timeout_of(opts));
}

std::shared_ptr<Work> GlooBackend::irecv(Tensor& tensor, int src, const SendOptions& opts) {
  if (src < 0 || src >= size_ || src == rank_) throw BackendError("recv: bad source rank " + std::to_string(src));
  Tensor h = host(tensor);
  std::unique_ptr<gloo::transport::UnboundBuffer> buf;
  guarded("recv", timeout_of(opts), [&] {
    buf = context_->createUnboundBuffer(h.data(), h.nbytes());
    buf->recv(src, kP2PSlot | uint32_t(opts.tag));
  });
  return std::make_shared<GlooWork>(*this, "recv", std::move(buf), h, tensor.device().is_cuda() ? tensor : Tensor(),
                                    false, timeout_of(opts));
}

void GlooBackend::barrier(const BarrierOptions& opts) {
  guarded("barrier", timeout_of(opts), [&] {
    gloo::BarrierOptions o(context_);
    o.setTag(next_tag_++);
    o.setTimeout(timeout_of(opts));
    gloo::barrier(o);
  });
}

std::shared_ptr<Backend> GlooBackend::new_group(const std::vector<int>& ranks) {
  const int id = groups_made_++;
  check_group_ranks(ranks);
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  std::vector<int> globals;
  for (int r : ranks) globals.push_back(global_rank(r));
  auto store = std::make_shared<PrefixStore>("group" + std::to_string(id), store_);
  return std::make_shared<GlooBackend>(store, int(it - ranks.begin()), int(ranks.size()), options_, liveness_, globals,
                                       device_);
}

}  // namespace distrun
