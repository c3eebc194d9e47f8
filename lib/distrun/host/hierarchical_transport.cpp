#include "distrun/host/hierarchical_transport.hpp"

#include <algorithm>
#include <cstring>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>


namespace distrun {

HierarchicalTransport::HierarchicalTransport(std::unique_ptr<PathCollectives> flat,
                                             std::shared_ptr<CollectiveTransport> local,
                                             std::shared_ptr<CollectiveTransport> cross,
                                             std::vector<std::vector<int>> ranks_on_host, int host, int place) {
  parts_.flat = std::move(flat);
  parts_.local = std::move(local);
  parts_.cross = std::move(cross);
  parts_.on = std::move(ranks_on_host);
  parts_.host = host;
  parts_.place = place;
}

HierarchicalTransport::~HierarchicalTransport() = default;

std::string HierarchicalTransport::name() const {
  const Parts& p = parts_;
  return "hierarchical(" + p.local->name() + " x" + std::to_string(p.on[0].size()) + ", " + p.cross->name() + " x" +
         std::to_string(p.on.size()) + ")";
}

namespace {

// Pieces a large all_reduce is cut into, so that the hosts' links carry piece c while the
// ranks of a host reduce piece c+1 and share piece c-1. Unpipelined, the shared-memory steps
// added a tenth to a half of the TCP step's time (16 MiB between two namespace hosts at
// 1 Gbit/s on a loaded 2-core VM: reduce_scatter 5-30 ms, all_gather 5-60 ms, TCP 110-145 ms).
// Pieces of at least 1 MiB (up to 16) keep each step's fixed costs (a TCP all_reduce's round
// trips, wake-ups) small against its bytes: at 512 KiB the 4 MiB point fell from 1.35x to
// 1.17x of the flat ring.
size_t pieces_for(size_t bytes) { return std::clamp<size_t>(bytes / (size_t(1) << 20), 1, 16); }

// The TCP step of every piece, on a thread of its own: it runs piece c once the host has
// reduced it (ready > c), and records how far it got (done) or what it threw.
class CrossSteps {
 public:
  CrossSteps(size_t pieces, std::function<void(size_t)> run)
      : pieces_(pieces), run_(std::move(run)), thread_([this] { loop(); }) {}
  // Waits for the thread: it never outlives the buffers it reads (its own steps are bounded
  // by their timeouts).
  ~CrossSteps() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      abandoned_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void reduced(size_t c) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_ = c + 1;
    }
    cv_.notify_all();
  }
  // Waits until piece c crossed the hosts; rethrows what the thread threw.
  void wait(size_t c) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ > c || error_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void loop() {
    try {
      for (size_t c = 0; c < pieces_; ++c) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return ready_ > c || abandoned_; });
          if (abandoned_) return;
        }
        run_(c);
        std::lock_guard<std::mutex> lock(mu_);
        done_ = c + 1;
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
    }
  }

  size_t pieces_;
  std::function<void(size_t)> run_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t ready_ = 0, done_ = 0;
  bool abandoned_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the rest is set up
};

using Parts = HierarchicalTransport::Parts;
using std::chrono::milliseconds;

// The intent of a step on a sub-group (kind, bytes per rank, root there), marked agreed: the
// whole group has agreed on `intent` already.
Intent step(const Intent& intent, CollectiveKind kind, uint64_t bytes, int root = -1) {
  Intent s = intent;
  s.kind = kind;
  s.bytes = bytes;
  s.root = root;
  s.flags |= Intent::kAgreed;
  return s;
}

void all_reduce(Parts& h, const HostOp& op, milliseconds timeout) {
  const size_t es = op.element_size;
  const size_t k = h.on[size_t(h.host)].size();
  const size_t count = op.intent.bytes / es;
  const size_t pieces = pieces_for(op.intent.bytes);
  // Each piece: k blocks of `block` elements, block i reduced by local rank i.
  const size_t block = count / (k * pieces);
  // Fewer elements than ranks on a host: nothing to split, and nothing worth it.
  if (block == 0) return h.flat->run(op, timeout);
  h.flat->agree(op.intent, timeout);
  const size_t block_bytes = block * es, piece_bytes = block_bytes * k;
  if (h.slice.size() < block_bytes * pieces) h.slice.resize(block_bytes * pieces);
  auto* base = static_cast<char*>(op.out);
  Intent local = op.intent;
  local.bytes = block_bytes;
  auto local_step = [&](CollectiveKind kind, size_t c) {
    local.kind = kind;
    char* piece = base + c * piece_bytes;
    char* mine = h.slice.data() + c * block_bytes;
    if (kind == CollectiveKind::ReduceScatter)
      h.local->run({local, piece, mine, es, op.fn}, timeout);
    else
      h.local->run({local, mine, piece}, timeout);
  };
  // Checked above across the whole group, of which the cross group is part: a second check per
  // piece would cost a round trip over the slow link each time (4 of them at 4 MiB).
  const Intent cross = step(op.intent, CollectiveKind::AllReduce, block_bytes, op.intent.root);
  auto cross_piece = [&](size_t c) {
    h.cross->run({cross, nullptr, h.slice.data() + c * block_bytes, es, op.fn}, timeout);
  };
  if (pieces == 1) {  // nothing to overlap: no thread
    local_step(CollectiveKind::ReduceScatter, 0);
    cross_piece(0);
    local_step(CollectiveKind::AllGather, 0);
  } else {
    CrossSteps steps(pieces, cross_piece);
    for (size_t c = 0; c < pieces; ++c) {
      local_step(CollectiveKind::ReduceScatter, c);
      steps.reduced(c);
    }
    for (size_t c = 0; c < pieces; ++c) {
      steps.wait(c);
      local_step(CollectiveKind::AllGather, c);
    }
  }
  // The last elements (fewer than k * pieces) did not fill a block: flat, and small.
  if (const size_t tail = count - block * k * pieces) {
    HostOp rest = op;
    rest.intent.bytes = tail * es;
    rest.out = base + piece_bytes * pieces;
    h.flat->run(rest, timeout);
  }
}

void all_gather(Parts& h, const HostOp& op, milliseconds timeout) {
  const size_t bytes = op.intent.bytes, hosts = h.on.size(), places = h.on[0].size();
  h.flat->agree(op.intent, timeout);
  // staged[g]: the block of the rank at our place on host g.
  if (h.staged.size() < hosts * bytes) h.staged.resize(hosts * bytes);
  h.cross->run({step(op.intent, CollectiveKind::AllGather, bytes), op.in, h.staged.data()}, timeout);
  // gathered[p][g]: the block of the rank at place p on host g.
  if (h.gathered.size() < places * hosts * bytes) h.gathered.resize(places * hosts * bytes);
  h.local->run({step(op.intent, CollectiveKind::AllGather, hosts * bytes), h.staged.data(), h.gathered.data()},
               timeout);
  auto* o = static_cast<char*>(op.out);
  for (size_t p = 0; p < places; ++p)
    for (size_t g = 0; g < hosts; ++g)
      std::memcpy(o + size_t(h.on[g][p]) * bytes, h.gathered.data() + (p * hosts + g) * bytes, bytes);
}

void reduce_scatter(Parts& h, const HostOp& op, milliseconds timeout) {
  const size_t bytes = op.intent.bytes, hosts = h.on.size(), places = h.on[0].size();
  h.flat->agree(op.intent, timeout);
  // staged[p][g]: our block for the rank at place p on host g, so that each place's blocks
  // are one contiguous piece for the host's reduce_scatter.
  if (h.staged.size() < places * hosts * bytes) h.staged.resize(places * hosts * bytes);
  const auto* i = static_cast<const char*>(op.in);
  for (size_t p = 0; p < places; ++p)
    for (size_t g = 0; g < hosts; ++g)
      std::memcpy(h.staged.data() + (p * hosts + g) * bytes, i + size_t(h.on[g][p]) * bytes, bytes);
  // gathered[g]: the host's sum of the block for the rank at our place on host g.
  if (h.gathered.size() < hosts * bytes) h.gathered.resize(hosts * bytes);
  h.local->run({step(op.intent, CollectiveKind::ReduceScatter, hosts * bytes), h.staged.data(), h.gathered.data(),
                op.element_size, op.fn},
               timeout);
  h.cross->run({step(op.intent, CollectiveKind::ReduceScatter, bytes), h.gathered.data(), op.out, op.element_size,
                op.fn},
               timeout);
}

void broadcast(Parts& h, const HostOp& op, milliseconds timeout) {
  h.flat->agree(op.intent, timeout);  // also refuses a root outside the group, before the search below
  size_t root_host = 0, root_place = 0;
  for (size_t g = 0; g < h.on.size(); ++g)
    for (size_t p = 0; p < h.on[g].size(); ++p)
      if (h.on[g][p] == op.intent.root) root_host = g, root_place = p;
  if (size_t(h.place) == root_place)
    h.cross->run({step(op.intent, CollectiveKind::Broadcast, op.intent.bytes, int(root_host)), nullptr, op.out},
                 timeout);
  h.local->run({step(op.intent, CollectiveKind::Broadcast, op.intent.bytes, int(root_place)), nullptr, op.out},
               timeout);
}

// The kinds composed by hosts; any other runs flat.
struct Composition {
  CollectiveKind kind;
  void (*run)(Parts&, const HostOp&, milliseconds);
};
constexpr Composition kCompositions[] = {
    {CollectiveKind::AllReduce, all_reduce},
    {CollectiveKind::AllGather, all_gather},
    {CollectiveKind::ReduceScatter, reduce_scatter},
    {CollectiveKind::Broadcast, broadcast},
};

// Up to this many bytes in a rank's larger buffer, a composed kind runs flat when the group's
// TCP path has a hub: 2(n - 1) messages through it, the check riding on them, where the
// composition's own check through the hub is as many again before its steps (figures in
// docs/performance.md).
constexpr uint64_t kFlatMost = uint64_t(64) << 10;

bool runs_flat(const Parts& h, const Intent& intent) {
  return larger_buffer(intent.kind, intent.bytes, h.on.size() * h.on[0].size()) <= kFlatMost && h.flat->hub() >= 0;
}

}  // namespace

void HierarchicalTransport::run(const HostOp& op, std::chrono::milliseconds timeout) {
  if (!runs_flat(parts_, op.intent))
    for (const Composition& c : kCompositions)
      if (c.kind == op.intent.kind) return c.run(parts_, op, timeout);
  parts_.flat->run(op, timeout);
}

}  // namespace distrun
