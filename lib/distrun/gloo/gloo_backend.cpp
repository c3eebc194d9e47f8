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
#include <cstring>

#include "distrun/backend/reduce_kernels.hpp"
#include "distrun/core/error.hpp"
#include "distrun/gloo/gloo_store.hpp"
#include "distrun/gloo/ring.hpp"

namespace distrun {

namespace {

// Slots for point-to-point traffic, apart from the tags the collectives use.
constexpr uint64_t kP2PSlot = 0x5e0d000000000000ull;
constexpr uint64_t kRingSlot = 0x4e5c000000000000ull;

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
    try {
      bool ok = is_send_ ? buf_->waitSend(t) : buf_->waitRecv(nullptr, t);
      if (!ok) throw TimeoutError(std::string(op_) + ": timed out after " + std::to_string(t.count()) + " ms");
    } catch (const std::exception& e) {
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
    : Backend(rank, size, std::move(global_ranks)), store_(std::move(store)), options_(options),
      liveness_(std::move(liveness)), device_(std::move(device)) {
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
  try {
    cma_ = CmaTransport::create(context_, *std::make_shared<PrefixStore>("cma", store_), rank_, size_,
                                [this] { return next_tag_++; });
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("rendezvous", e);
  }
}

GlooBackend::~GlooBackend() = default;

void GlooBackend::fail(const char* op, const std::exception& e) {
  if (dynamic_cast<const PeerError*>(&e)) throw;
  std::vector<int> members;
  for (int r = 0; r < size_; ++r) members.push_back(global_rank(r));
  std::string loss = liveness_ ? liveness_->describe_loss(members) : "";
  std::string msg = "rank " + std::to_string(global_rank(rank_)) + ": " + op + " failed";
  msg += loss.empty() ? "" : ": " + loss;
  msg += std::string(" [") + e.what() + "]";
  if (!loss.empty()) throw PeerError(liveness_->last_lost(), msg);
  if (dynamic_cast<const TimeoutError*>(&e) || std::strstr(e.what(), "imed out")) throw TimeoutError(msg);
  throw BackendError(msg);
}

template <typename F>
void GlooBackend::guarded(const char* op, F&& f) {
  try {
    f();
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    fail(op, e);
  }
}

void GlooBackend::broadcast(Tensor& tensor, const BroadcastOptions& opts) {
  Tensor h = host(tensor);
  guarded("broadcast", [&] {
    if (cma_) return cma_->broadcast(h.data(), h.nbytes(), opts.root, timeout_of(opts));
    gloo::BroadcastOptions o(context_);
    dispatch_storage(h.dtype(), [&](auto tag) { o.setOutput(h.data_as<decltype(tag)>(), size_t(h.numel())); });
    o.setRoot(opts.root);
    o.setTag(next_tag_++);
    o.setTimeout(timeout_of(opts));
    gloo::broadcast(o);
  });
  copy_back(tensor, h);
}

void GlooBackend::all_reduce(Tensor& tensor, const AllreduceOptions& opts) {
  Tensor h = host(tensor);
  ReduceFn fn = reduce_kernel(h.dtype(), opts.op);
  guarded("all_reduce", [&] {
    if (cma_) return cma_->all_reduce(h.data(), size_t(h.numel()), h.element_size(), fn, timeout_of(opts));
    if (options_.allreduce_algorithm == "ring") return ring_all_reduce(ring_plan(fn, h.element_size(), opts), h.data(), size_t(h.numel()));
    gloo::AllreduceOptions o(context_);
    dispatch_storage(h.dtype(), [&](auto tag) { o.setOutput(h.data_as<decltype(tag)>(), size_t(h.numel())); });
    o.setReduceFunction(fn);
    o.setTag(next_tag_++);
    o.setTimeout(timeout_of(opts));
    gloo::allreduce(o);
  });
  if (opts.op == ReduceOp::Avg) divide_by(h, size_);
  copy_back(tensor, h);
}

RingPlan GlooBackend::ring_plan(ReduceFn fn, size_t element_size, const CollectiveOptions& opts) {
  return RingPlan{context_.get(), rank_, size_, kRingSlot | next_tag_++, timeout_of(opts), fn, element_size};
}

void GlooBackend::reduce(Tensor& tensor, const ReduceOptions& opts) {
  Tensor h = host(tensor);
  ReduceFn fn = reduce_kernel(h.dtype(), opts.op);
  guarded("reduce", [&] {
    if (cma_) return cma_->reduce(h.data(), size_t(h.numel()), h.element_size(), fn, opts.root, timeout_of(opts));
    gloo::ReduceOptions o(context_);
    dispatch_storage(h.dtype(), [&](auto tag) { o.setOutput(h.data_as<decltype(tag)>(), size_t(h.numel())); });
    o.setRoot(opts.root);
    o.setReduceFunction(fn);
    o.setTag(next_tag_++);
    o.setTimeout(timeout_of(opts));
    gloo::reduce(o);
  });
  if (opts.op == ReduceOp::Avg && rank_ == opts.root) divide_by(h, size_);
  copy_back(tensor, h);
}

void GlooBackend::all_gather(const Tensor& in, Tensor& out, const AllgatherOptions& opts) {
  check_numel("all_gather", out, in.numel() * size_);
  Tensor hi = host(in), ho = host(out);
  guarded("all_gather", [&] {
    if (cma_) return cma_->all_gather(hi.data(), ho.data(), hi.nbytes(), timeout_of(opts));
    gloo::AllgatherOptions o(context_);
    dispatch_storage(hi.dtype(), [&](auto tag) {
      using T = decltype(tag);
      o.setInput(const_cast<T*>(hi.data_as<T>()), size_t(hi.numel()));
      o.setOutput(ho.data_as<T>(), size_t(ho.numel()));
    });
    o.setTag(next_tag_++);
    o.setTimeout(timeout_of(opts));
    gloo::allgather(o);
  });
  copy_back(out, ho);
}

void GlooBackend::gather(const Tensor& in, Tensor& out, const GatherOptions& opts) {
  const bool root = rank_ == opts.root;
  if (root) check_numel("gather", out, in.numel() * size_);
  Tensor hi = host(in), ho = root ? host(out) : Tensor();
  guarded("gather", [&] {
    if (cma_) return cma_->gather(hi.data(), root ? ho.data() : nullptr, hi.nbytes(), opts.root, timeout_of(opts));
    gloo::GatherOptions o(context_);
    dispatch_storage(hi.dtype(), [&](auto tag) {
      using T = decltype(tag);
      o.setInput(const_cast<T*>(hi.data_as<T>()), size_t(hi.numel()));
      if (root) o.setOutput(ho.data_as<T>(), size_t(ho.numel()));
    });
    o.setRoot(opts.root);
    o.setTag(next_tag_++);
    o.setTimeout(timeout_of(opts));
    gloo::gather(o);
  });
  if (root) copy_back(out, ho);
}

void GlooBackend::scatter(const Tensor& in, Tensor& out, const ScatterOptions& opts) {
  const bool root = rank_ == opts.root;
  if (root) check_numel("scatter", in, out.numel() * size_);
  Tensor hi = root ? host(in) : Tensor(), ho = host(out);
  guarded("scatter", [&] {
    if (cma_) return cma_->scatter(root ? hi.data() : nullptr, ho.data(), ho.nbytes(), opts.root, timeout_of(opts));
    gloo::ScatterOptions o(context_);
    dispatch_storage(ho.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if (root) {
        std::vector<T*> blocks;
        for (int r = 0; r < size_; ++r) blocks.push_back(const_cast<T*>(hi.data_as<T>()) + r * ho.numel());
        o.setInputs(blocks, size_t(ho.numel()));
      }
      o.setOutput(ho.data_as<T>(), size_t(ho.numel()));
    });
    o.setRoot(opts.root);
    o.setTag(next_tag_++);
    o.setTimeout(timeout_of(opts));
    gloo::scatter(o);
  });
  copy_back(out, ho);
}

void GlooBackend::reduce_scatter(const Tensor& in, Tensor& out, const ReduceScatterOptions& opts) {
  check_numel("reduce_scatter", in, out.numel() * size_);
  ReduceFn fn = reduce_kernel(in.dtype(), opts.op);
  const Tensor hin = host(in);
  Tensor hout = host(out);
  const size_t block = hout.nbytes();
  if (size_ == 1 || block == 0) {
    std::memcpy(hout.data(), hin.data(), block);
  } else {
    // Kept across calls: fresh scratch would fault its pages in again every time.
    if (scratch_.nbytes() < 2 * block) scratch_ = Tensor::empty({int64_t(2 * block)}, DType::UInt8);
    guarded("reduce_scatter", [&] {
      if (cma_) return cma_->reduce_scatter(hin.data(), hout.data(), block, hout.element_size(), fn, timeout_of(opts));
      ring_reduce_scatter(ring_plan(fn, hout.element_size(), opts), hin.data(), hout.data(), block, scratch_.data());
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
  guarded("all_to_all", [&] {
    if (cma_) {
      const size_t es = hi.element_size();
      std::vector<size_t> send_offset, recv_bytes;
      size_t at = 0;
      for (int j = 0; j < size_; ++j) {
        const size_t send = even ? hi.nbytes() / size_t(size_) : size_t(opts.send_counts[size_t(j)]) * es;
        send_offset.push_back(at);
        at += send;
        recv_bytes.push_back(even ? ho.nbytes() / size_t(size_) : size_t(opts.recv_counts[size_t(j)]) * es);
      }
      return cma_->all_to_all(hi.data(), ho.data(), send_offset, recv_bytes, timeout_of(opts));
    }
    dispatch_storage(hi.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if (even) {
        gloo::AlltoallOptions o(context_);
        o.setInput(const_cast<T*>(hi.data_as<T>()), size_t(hi.numel()));
        o.setOutput(ho.data_as<T>(), size_t(ho.numel()));
        o.setTag(next_tag_++);
        o.setTimeout(timeout_of(opts));
        gloo::alltoall(o);
      } else {
        gloo::AlltoallvOptions o(context_);
        o.setInput(const_cast<T*>(hi.data_as<T>()), opts.send_counts);
        o.setOutput(ho.data_as<T>(), opts.recv_counts);
        o.setTag(next_tag_++);
        o.setTimeout(timeout_of(opts));
        gloo::alltoallv(o);
      }
    });
  });
  copy_back(out, ho);
}

void GlooBackend::send(const Tensor& tensor, int dst, const SendOptions& opts) { isend(tensor, dst, opts)->wait(); }

void GlooBackend::recv(Tensor& tensor, int src, const SendOptions& opts) { irecv(tensor, src, opts)->wait(); }

std::shared_ptr<Work> GlooBackend::isend(const Tensor& tensor, int dst, const SendOptions& opts) {
  if (dst < 0 || dst >= size_ || dst == rank_) throw BackendError("send: bad destination rank " + std::to_string(dst));
  Tensor h = host(tensor);
  std::unique_ptr<gloo::transport::UnboundBuffer> buf;
  guarded("send", [&] {
    buf = context_->createUnboundBuffer(h.data(), h.nbytes());
    buf->send(dst, kP2PSlot | uint32_t(opts.tag));
  });
  return std::make_shared<GlooWork>(*this, "send", std::move(buf), h, Tensor(), true, timeout_of(opts));
}

std::shared_ptr<Work> GlooBackend::irecv(Tensor& tensor, int src, const SendOptions& opts) {
  if (src < 0 || src >= size_ || src == rank_) throw BackendError("recv: bad source rank " + std::to_string(src));
  Tensor h = host(tensor);
  std::unique_ptr<gloo::transport::UnboundBuffer> buf;
  guarded("recv", [&] {
    buf = context_->createUnboundBuffer(h.data(), h.nbytes());
    buf->recv(src, kP2PSlot | uint32_t(opts.tag));
  });
  return std::make_shared<GlooWork>(*this, "recv", std::move(buf), h, tensor.device().is_cuda() ? tensor : Tensor(),
                                    false, timeout_of(opts));
}

void GlooBackend::barrier(const BarrierOptions& opts) {
  guarded("barrier", [&] {
    gloo::BarrierOptions o(context_);
    o.setTag(next_tag_++);
    o.setTimeout(timeout_of(opts));
    gloo::barrier(o);
  });
}

std::shared_ptr<Backend> GlooBackend::new_group(const std::vector<int>& ranks) {
  const int id = groups_made_++;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] < 0 || ranks[i] >= size_ || (i > 0 && ranks[i] <= ranks[i - 1]))
      throw BackendError("new_group: ranks must be ascending, unique and within 0.." + std::to_string(size_ - 1));
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  std::vector<int> globals;
  for (int r : ranks) globals.push_back(global_rank(r));
  auto store = std::make_shared<PrefixStore>("group" + std::to_string(id), store_);
  return std::make_shared<GlooBackend>(store, int(it - ranks.begin()), int(ranks.size()), options_, liveness_, globals,
                                       device_);
}

}  // namespace distrun
