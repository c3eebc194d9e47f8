#include "distrun/gloo/gloo_backend.hpp"

#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <ctime>

#include "distrun/backend/reduce_kernels.hpp"
#include "distrun/core/error.hpp"
#include "distrun/core/log.hpp"
#include "distrun/gloo/gloo_store.hpp"
#include "distrun/host/paths/socket_mesh.hpp"

namespace distrun {

namespace {

// Slots for point-to-point traffic, apart from the tags the collectives use.
constexpr uint64_t kP2PSlot = 0x5e0d000000000000ull;

// The monotonic clock to the scheduler tick, read in a few nanoseconds where the precise one
// takes tens: every collective reads it, and only needs to know whether a deadline of
// milliseconds has passed.
std::chrono::nanoseconds coarse_now() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
}
std::chrono::nanoseconds coarse_tick() {
  static const std::chrono::nanoseconds tick = [] {
    timespec t{};
    clock_getres(CLOCK_MONOTONIC_COARSE, &t);
    return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
  }();
  return tick;
}

// Host copies of CUDA tensors: Gloo only moves host memory.
Tensor host(const Tensor& t) { return t.device().is_cuda() ? t.to(Device::cpu()) : t; }
// The same for a collective, which ends before `t` may go: a CPU tensor is itself (a copy
// would cost its shape's allocation and a reference count, every call); a CUDA one is copied
// into `staged`.
template <typename T>
T& on_host(T& t, Tensor& staged) {
  if (!t.device().is_cuda()) return t;
  staged = t.to(Device::cpu());
  return staged;
}
void copy_back(Tensor& dst, const Tensor& h) {
  if (dst.device().is_cuda()) dst.copy_from(h);
}

void check_numel(const char* op, const Tensor& t, int64_t expected) {
  if (t.numel() != expected)
    throw BackendError(std::string(op) + ": buffer has " + std::to_string(t.numel()) + " elements, expected " +
                       std::to_string(expected));
}

// A caller's buffer of n blocks of the wrong size still goes to the meeting, whose check
// refuses it on every rank (Intent::whole); until then the path works on a stand-in of the
// right size (made in `stand_in`), so that nothing before the check reads or writes past the
// caller's buffer.
template <typename T>
T& right_sized(T& t, size_t bytes, Tensor& stand_in) {
  if (t.nbytes() == bytes) return t;
  stand_in = Tensor::zeros({int64_t(bytes)}, DType::UInt8);
  return stand_in;
}

// A point-to-point message, with torch's progress: the payload is posted by isend and irecv
// themselves, so it moves whether or not either side is in wait() (`isend; recv; wait` on both
// ranks of an exchange, or a ring's `isend; irecv; wait; wait`, meet). Beside it each side
// states what it passes (dtype, bytes, tag) and wait() checks the other's statement, so a
// disagreement is the same CollectiveMismatchError on both ranks. A payload longer than the
// posted receive would make Gloo terminate the process, so the payload moves in one message
// per set bit of its size, bit i (2^i bytes) on a slot of its own: a message only ever meets a
// receive of exactly its length, and parts of a disagreeing size find no partner and never
// move. After a mismatch the unmatched parts stay queued in Gloo by weak pointers (this Work
// may go) and the receive buffer holds whatever parts did match.
class P2PWork : public Work {
 public:
  struct Side {
    int peer;  // group rank
    int sender_global, receiver_global;
    uint64_t slot;  // the message's slots: | 1 sender's statement, | 2 receiver's; with the top
                    // byte replaced by a bit number, | 0: the payload's part of that size
  };
  P2PWork(GlooBackend& backend, gloo::Context& context, bool is_send, Side side, Tensor host_buffer,
          Tensor device_target, uint32_t tag, std::chrono::milliseconds timeout)
      : backend_(backend), is_send_(is_send), side_(side), keep_(std::move(host_buffer)),
        target_(std::move(device_target)), timeout_(timeout) {
    mine_ = {kMagic, uint64_t(keep_.dtype()), uint64_t(keep_.nbytes()), tag};
    mine_buf_ = context.createUnboundBuffer(mine_.data(), sizeof mine_);
    theirs_buf_ = context.createUnboundBuffer(theirs_.data(), sizeof theirs_);
    payload_ = context.createUnboundBuffer(keep_.data(), keep_.nbytes());
    mine_buf_->send(side_.peer, side_.slot | (is_send_ ? 1 : 2));
    theirs_buf_->recv(side_.peer, side_.slot | (is_send_ ? 2 : 1));
    // Highest bit first; a 0-byte payload has no part at all.
    size_t at = 0;
    for (int bit = 63; bit >= 0; --bit) {
      const size_t part = size_t(1) << bit;
      if (!(size_t(keep_.nbytes()) & part)) continue;
      const uint64_t slot = (side_.slot & ~(0xffull << 48)) | uint64_t(bit) << 48;
      if (is_send_)
        payload_->send(side_.peer, slot, at, part);
      else
        payload_->recv(side_.peer, slot, at, part);
      at += part, ++parts_;
    }
  }

  void wait(std::chrono::milliseconds timeout) override {
    if (done_) return;
    const char* op = is_send_ ? "send" : "recv";
    auto t = timeout.count() > 0 ? timeout : timeout_;
    const auto start = std::chrono::steady_clock::now();
    const std::string late = std::string(op) + ": timed out after " + std::to_string(t.count()) + " ms";
    const std::vector<int> peer{is_send_ ? side_.receiver_global : side_.sender_global};
    auto require = [&](bool ok) {
      if (!ok) throw TimeoutError(late, peer);
    };
    try {
      // Our statement must have left before its buffer may go: Gloo's pair would stall on a
      // queued send whose buffer is gone.
      require(mine_buf_->waitSend(nullptr, t));
      require(theirs_buf_->waitRecv(nullptr, t));
      const std::string problem = disagreement();
      // On a disagreement the parts both sizes share still meet (same slot, same length):
      // waited for all the same, so that no transfer outlives its buffer.
      const int moving = problem.empty()        ? parts_
                         : theirs_[0] == kMagic ? __builtin_popcountll(mine_[2] & theirs_[2])
                                                : 0;
      for (int k = 0; k < moving; ++k)
        require(is_send_ ? payload_->waitSend(nullptr, t) : payload_->waitRecv(nullptr, t));
      if (!problem.empty()) throw CollectiveMismatchError(problem);
    } catch (const Error& e) {
      backend_.fail(op, e);
    } catch (const std::exception& e) {
      // As GlooBackend::guarded: Gloo's exception does not say "timeout"; the clock does.
      if (std::chrono::steady_clock::now() - start >= t)
        backend_.fail(op, TimeoutError(late + " [" + e.what() + "]", peer));
      backend_.fail(op, e);
    }
    if (target_.defined()) target_.copy_from(keep_);
    done_ = true;
  }
  bool is_completed() override { return done_; }

 private:
  static constexpr uint64_t kMagic = 0x64697374702f7032ull;  // "distp/p2"
  // Both ranks compare the same two statements, so both find the same message ("": they agree).
  std::string disagreement() const {
    const auto& sent = is_send_ ? mine_ : theirs_;
    const auto& expected = is_send_ ? theirs_ : mine_;
    auto what = [](const std::array<uint64_t, 4>& s) {
      return std::to_string(s[2]) + " bytes of " + (s[1] < 64 ? dtype_name(DType(s[1])) : std::string("?"));
    };
    const std::string who = "send/recv from rank " + std::to_string(side_.sender_global) + " to rank " +
                            std::to_string(side_.receiver_global) + " (tag " + std::to_string(mine_[3]) + "): ";
    if (theirs_[0] != kMagic) return who + "the peer's statement is not one of distrun's";
    if (sent[1] != expected[1] || sent[2] != expected[2])
      return who + "rank " + std::to_string(side_.sender_global) + " sends " + what(sent) + ", rank " +
             std::to_string(side_.receiver_global) + " expects " + what(expected);
    return "";
  }

  GlooBackend& backend_;
  bool is_send_;
  Side side_;
  Tensor keep_, target_;
  std::chrono::milliseconds timeout_;
  std::array<uint64_t, 4> mine_{}, theirs_{};
  std::unique_ptr<gloo::transport::UnboundBuffer> mine_buf_, theirs_buf_, payload_;
  int parts_ = 0;  // payload messages: one per set bit of its size
  bool done_ = false;
};

}  // namespace

GlooBackend::GlooBackend(std::shared_ptr<Store> store, int rank, int size, const GlooBackendOptions& options,
                         std::shared_ptr<Liveness> liveness, std::vector<int> global_ranks,
                         std::shared_ptr<gloo::transport::Device> device)
    : Backend(rank, size, std::move(global_ranks), std::move(liveness), options.timeout), store_(std::move(store)),
      options_(options), device_(std::move(device)) {
  transport_ = choose_transport();
  if (options_.log_choice && rank_ == 0 && size_ > 1) {
    std::string members;
    for (int r = 0; r < size_; ++r) members += (r ? "," : "") + std::to_string(global_rank(r));
    log().info("gloo group of {} ranks [{}]: {} path", size_, members, transport_->name());
  }
}

GlooBackend::~GlooBackend() {
  if (mesh_) log().debug("rank {}: {} tcp connections opened", global_rank(rank_), mesh_->connections());
}

namespace {

// Where Gloo binds (an address, or an interface's), resolved.
gloo::transport::tcp::attr device_attr(const GlooBackendOptions& options) {
  gloo::transport::tcp::attr attr;
  if (!options.iface.empty())
    attr.iface = options.iface;
  else
    attr.hostname = options.hostname.empty() ? "127.0.0.1" : options.hostname;
  return attr;
}

[[noreturn]] void cannot_bind(const gloo::transport::tcp::attr& attr, const std::exception& e) {
  throw ConfigError("gloo: cannot use " +
                    (attr.iface.empty() ? "address " + attr.hostname : "interface " + attr.iface) + ": " + e.what());
}

}  // namespace

void GlooBackend::connect_gloo() {
  if (context_) return;
  if (!device_) {
    const auto attr = device_attr(options_);
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      cannot_bind(attr, e);
    }
  }
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
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
}

const std::shared_ptr<SocketMesh>& GlooBackend::mesh() {
  if (mesh_) return mesh_;
  const auto attr = device_attr(options_);
  gloo::transport::tcp::attr resolved;
  try {
    resolved = gloo::transport::tcp::CreateDeviceAttr(attr);
  } catch (const std::exception& e) {
    cannot_bind(attr, e);
  }
  mesh_ = std::make_shared<SocketMesh>(std::make_shared<PrefixStore>("sock", store_), rank_, size_, resolved.ai_addr,
                                       global_ranks_, options_.secret);
  p2p_ = std::make_unique<SocketP2P>(mesh_, global_ranks_,
                                     [this](const char* op, const std::exception& e) { fail(op, e); });
  return mesh_;
}

std::unique_ptr<CollectiveTransport> GlooBackend::choose_transport() {
  PathGroup group;
  group.rank = rank_, group.size = size_, group.global_ranks = global_ranks_;
  group.store = store_;
  group.settings = options_;
  group.gloo = [this] {
    connect_gloo();
    return context_;
  };
  group.sockets = [this] { return mesh(); };
  group.next_tag = [this] { return next_tag_++; };
  group.subgroup = [this](const std::string& prefix, const std::vector<int>& ranks, PathPreference preference) {
    GlooBackendOptions inner = options_;
    inner.log_choice = false;
    inner.transport = preference;
    std::vector<int> globals;
    for (int r : ranks) globals.push_back(global_rank(r));
    const int rank = int(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
    auto made = std::make_shared<GlooBackend>(std::make_shared<PrefixStore>(prefix, store_), rank, int(ranks.size()),
                                              inner, liveness_, std::move(globals), device_);
    // Its collectives, kept alive by the group that owns them.
    return std::shared_ptr<CollectiveTransport>(made, &made->transport());
  };
  try {
    return make_transport(group);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("rendezvous", e);
  }
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
  const auto start = coarse_now();
  try {
    f();
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    fail(op, e);
  } catch (const std::exception& e) {
    // Gloo throws one exception type for a timeout and a broken pair alike; the fact that
    // tells them apart is whether the deadline has passed: by the coarse clock with a tick
    // added, so a real timeout is never missed, and a pair broken up to two ticks (4-20 ms)
    // before the deadline is reported as a timeout.
    if (coarse_now() - start + coarse_tick() >= timeout)
      fail(op, TimeoutError("timed out after " + std::to_string(timeout.count()) + " ms [" + e.what() + "]"));
    fail(op, e);
  }
}

void GlooBackend::run(const CollectiveOp& op) {
  switch (op.form().buffers) {
    case Buffers::None: return run_barrier(op);
    case Buffers::Exchanges: return run_all_to_all(op);
    default: return run_blocks(op);
  }
}

void GlooBackend::run_blocks(const CollectiveOp& op) {
  const CollectiveForm& form = op.form();
  const bool gathers = form.buffers == Buffers::Gathers, scatters = form.buffers == Buffers::Scatters;
  const bool root = rank_ == op.root;
  // The buffers this rank has: a rooted gather's output and a rooted scatter's input are the
  // root's only; the in-place kinds have `out` alone.
  const bool has_in = (gathers || scatters) && !(form.rooted && scatters && !root);
  const bool has_out = !(form.rooted && gathers && !root);
  Tensor staged_in, staged_out, stand_in;  // used only for CUDA tensors and wrong sizes
  const Tensor& hi = has_in ? on_host(*op.in, staged_in) : staged_in;
  Tensor& ho = has_out ? on_host(*op.out, staged_out) : staged_out;
  const Tensor& block = gathers ? hi : ho;
  const auto timeout = timeout_of(op);
  const ReduceFn fn = form.reduces ? reduce_kernel(block.dtype(), op.reduce) : nullptr;
  if (op.kind == CollectiveKind::ReduceScatter && size_ == 1) {
    check_numel(form.name, *op.in, op.out->numel());
    std::memcpy(ho.data(), hi.data(), ho.nbytes());
  } else {
    Intent want = intent(op.kind, block.dtype(), block.nbytes(), form.rooted ? op.root : -1,
                         form.reduces ? std::optional<ReduceOp>(op.reduce) : std::nullopt);
    // The buffer of n blocks, where this rank has one, is stated and checked with the rest.
    const void* in = hi.data();
    void* out = ho.data();
    const size_t whole = block.nbytes() * size_t(size_);
    if (gathers && has_out) {
      want.whole = ho.nbytes();
      out = right_sized(ho, whole, stand_in).data();
    } else if (scatters && has_in) {
      want.whole = hi.nbytes();
      in = right_sized(hi, whole, stand_in).data();
    }
    const HostOp host_op{std::move(want), in, out, fn ? block.element_size() : 0, fn};
    guarded(form.name, timeout, [&] { transport_->run(host_op, timeout); });
  }
  // A rooted reduction's result is the root's only.
  if (form.reduces && op.reduce == ReduceOp::Avg && (!form.rooted || root)) divide_by(ho, size_);
  if (has_out) copy_back(*op.out, ho);
}

void GlooBackend::run_all_to_all(const CollectiveOp& opts) {
  const Tensor& in = *opts.in;
  Tensor& out = *opts.out;
  Tensor staged_in, staged_out;  // used only for CUDA tensors
  const Tensor& hi = on_host(in, staged_in);
  Tensor& ho = on_host(out, staged_out);
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
  for (auto* v : {&want.send_offset, &want.send_bytes, &want.recv_bytes}) v->reserve(size_t(size_));
  for (int j = 0; j < size_; ++j) {
    const size_t send = even ? hi.nbytes() / size_t(size_) : size_t(opts.send_counts[size_t(j)]) * es;
    want.send_offset.push_back(at);
    want.send_bytes.push_back(send);
    at += send;
    want.recv_bytes.push_back(even ? ho.nbytes() / size_t(size_) : size_t(opts.recv_counts[size_t(j)]) * es);
  }
  guarded("all_to_all", timeout_of(opts), [&] {
    transport_->run({std::move(want), hi.data(), ho.data()}, timeout_of(opts));
  });
  copy_back(*opts.out, ho);
}

uint64_t GlooBackend::p2p_slot(int peer, uint32_t tag, bool sending) {
  auto& count = (sending ? sent_ : received_)[{peer, tag}];
  // kP2PSlot | tag | the message's number with this peer and tag (14 bits: wrapping is
  // harmless unless a message 16384 back was abandoned) | two bits for the part.
  return kP2PSlot | uint64_t(tag) << 16 | uint64_t(count++ & 0x3fff) << 2;
}

std::shared_ptr<Work> GlooBackend::isend(const Tensor& tensor, int dst, const SendOptions& opts) {
  if (dst < 0 || dst >= size_ || dst == rank_) throw BackendError("send: bad destination rank " + std::to_string(dst));
  Tensor h = host(tensor);
  std::shared_ptr<Work> work;
  if (p2p_) return p2p_->isend(h, dst, uint32_t(opts.tag), timeout_of(opts));
  guarded("send", timeout_of(opts), [&] {
    P2PWork::Side side{dst, global_rank(rank_), global_rank(dst), p2p_slot(dst, uint32_t(opts.tag), true)};
    work = std::make_shared<P2PWork>(*this, *context_, true, side, h, Tensor(), uint32_t(opts.tag), timeout_of(opts));
  });
  return work;
}

std::shared_ptr<Work> GlooBackend::irecv(Tensor& tensor, int src, const SendOptions& opts) {
  if (src < 0 || src >= size_ || src == rank_) throw BackendError("recv: bad source rank " + std::to_string(src));
  Tensor h = host(tensor);
  std::shared_ptr<Work> work;
  if (p2p_)
    return p2p_->irecv(h, tensor.device().is_cuda() ? tensor : Tensor(), src, uint32_t(opts.tag), timeout_of(opts));
  guarded("recv", timeout_of(opts), [&] {
    P2PWork::Side side{src, global_rank(src), global_rank(rank_), p2p_slot(src, uint32_t(opts.tag), false)};
    work = std::make_shared<P2PWork>(*this, *context_, false, side, h, tensor.device().is_cuda() ? tensor : Tensor(),
                                     uint32_t(opts.tag), timeout_of(opts));
  });
  return work;
}

void GlooBackend::run_barrier(const CollectiveOp& opts) {
  if (!context_) {
    // A collective of no bytes: it returns once every member's intent is in. (Buffers that are
    // not null: a composite path may hand them to memcpy for no bytes.)
    char none = 0;
    guarded("barrier", timeout_of(opts), [&] {
      transport_->run({intent(CollectiveKind::AllGather, DType::UInt8, 0), &none, &none}, timeout_of(opts));
    });
    return;
  }
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
