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
                                             std::vector<std::vector<int>> ranks_on_host, int host, int place)
    : flat_(std::move(flat)), local_(std::move(local)), cross_(std::move(cross)), on_(std::move(ranks_on_host)),
      host_(host), place_(place) {}

HierarchicalTransport::~HierarchicalTransport() = default;

std::string HierarchicalTransport::name() const {
  return "hierarchical(" + local_->name() + " x" + std::to_string(on_[0].size()) + ", " + cross_->name() + " x" +
         std::to_string(on_.size()) + ")";
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

}  // namespace

void HierarchicalTransport::run(const HostOp& op, std::chrono::milliseconds timeout) {
  switch (op.intent.kind) {
    case CollectiveKind::AllReduce: return all_reduce(op.intent, op.out, op.element_size, op.fn, timeout);
    case CollectiveKind::AllGather: return all_gather(op.intent, op.in, op.out, timeout);
    case CollectiveKind::ReduceScatter:
      return reduce_scatter(op.intent, op.in, op.out, op.element_size, op.fn, timeout);
    case CollectiveKind::Broadcast: return broadcast(op.intent, op.out, timeout);
    default: return flat_->run(op, timeout);
  }
}

void HierarchicalTransport::all_reduce(const Intent& intent, void* data, size_t es, ReduceFn fn,
                                       std::chrono::milliseconds timeout) {
  const size_t k = on_[size_t(host_)].size();
  const size_t count = intent.bytes / es;
  const size_t pieces = pieces_for(intent.bytes);
  // Each piece: k blocks of `block` elements, block i reduced by local rank i.
  const size_t block = count / (k * pieces);
  // Fewer elements than ranks on a host: nothing to split, and nothing worth it.
  if (block == 0) return flat_->all_reduce(intent, data, es, fn, timeout);
  flat_->agree(intent, timeout);
  const size_t block_bytes = block * es, piece_bytes = block_bytes * k;
  if (slice_.size() < block_bytes * pieces) slice_.resize(block_bytes * pieces);
  auto* base = static_cast<char*>(data);
  Intent step = intent;
  step.bytes = block_bytes;
  auto local_step = [&](CollectiveKind kind, size_t c) {
    step.kind = kind;
    char* piece = base + c * piece_bytes;
    char* mine = slice_.data() + c * block_bytes;
    if (kind == CollectiveKind::ReduceScatter)
      local_->run({step, piece, mine, es, fn}, timeout);
    else
      local_->run({step, mine, piece}, timeout);
  };
  Intent cross_step = intent;
  cross_step.bytes = block_bytes;
  cross_step.kind = CollectiveKind::AllReduce;
  // Checked above across the whole group, of which the cross group is part: a second check per
  // piece would cost a round trip over the slow link each time (4 of them at 4 MiB).
  cross_step.flags |= Intent::kAgreed;
  auto cross_piece = [&](size_t c) {
    cross_->run({cross_step, nullptr, slice_.data() + c * block_bytes, es, fn}, timeout);
  };
  if (pieces == 1) {  // nothing to overlap: no thread
    local_step(CollectiveKind::ReduceScatter, 0);
    cross_piece(0);
    local_step(CollectiveKind::AllGather, 0);
  } else {
    CrossSteps cross(pieces, cross_piece);
    for (size_t c = 0; c < pieces; ++c) {
      local_step(CollectiveKind::ReduceScatter, c);
      cross.reduced(c);
    }
    for (size_t c = 0; c < pieces; ++c) {
      cross.wait(c);
      local_step(CollectiveKind::AllGather, c);
    }
  }
  // The last elements (fewer than k * pieces) did not fill a block: flat, and small.
  if (const size_t tail = count - block * k * pieces) {
    Intent rest = intent;
    rest.bytes = tail * es;
    flat_->all_reduce(rest, base + piece_bytes * pieces, es, fn, timeout);
  }
}

Intent HierarchicalTransport::step(const Intent& intent, CollectiveKind kind, uint64_t bytes, int root) {
  Intent s = intent;
  s.kind = kind;
  s.bytes = bytes;
  s.root = root;
  s.flags |= Intent::kAgreed;
  return s;
}

void HierarchicalTransport::all_gather(const Intent& intent, const void* in, void* out,
                                       std::chrono::milliseconds timeout) {
  const size_t bytes = intent.bytes, hosts = on_.size(), places = on_[0].size();
  flat_->agree(intent, timeout);
  // staged_[g]: the block of the rank at our place on host g.
  if (staged_.size() < hosts * bytes) staged_.resize(hosts * bytes);
  cross_->run({step(intent, CollectiveKind::AllGather, bytes), in, staged_.data()}, timeout);
  // gathered_[p][g]: the block of the rank at place p on host g.
  if (gathered_.size() < places * hosts * bytes) gathered_.resize(places * hosts * bytes);
  local_->run({step(intent, CollectiveKind::AllGather, hosts * bytes), staged_.data(), gathered_.data()}, timeout);
  auto* o = static_cast<char*>(out);
  for (size_t p = 0; p < places; ++p)
    for (size_t g = 0; g < hosts; ++g)
      std::memcpy(o + size_t(on_[g][p]) * bytes, gathered_.data() + (p * hosts + g) * bytes, bytes);
}

void HierarchicalTransport::reduce_scatter(const Intent& intent, const void* in, void* out, size_t element_size,
                                           ReduceFn fn, std::chrono::milliseconds timeout) {
  const size_t bytes = intent.bytes, hosts = on_.size(), places = on_[0].size();
  flat_->agree(intent, timeout);
  // staged_[p][g]: our block for the rank at place p on host g, so that each place's blocks
  // are one contiguous piece for the host's reduce_scatter.
  if (staged_.size() < places * hosts * bytes) staged_.resize(places * hosts * bytes);
  const auto* i = static_cast<const char*>(in);
  for (size_t p = 0; p < places; ++p)
    for (size_t g = 0; g < hosts; ++g)
      std::memcpy(staged_.data() + (p * hosts + g) * bytes, i + size_t(on_[g][p]) * bytes, bytes);
  // gathered_[g]: the host's sum of the block for the rank at our place on host g.
  if (gathered_.size() < hosts * bytes) gathered_.resize(hosts * bytes);
  local_->run({step(intent, CollectiveKind::ReduceScatter, hosts * bytes), staged_.data(), gathered_.data(),
               element_size, fn},
              timeout);
  cross_->run({step(intent, CollectiveKind::ReduceScatter, bytes), gathered_.data(), out, element_size, fn}, timeout);
}

void HierarchicalTransport::broadcast(const Intent& intent, void* data, std::chrono::milliseconds timeout) {
  flat_->agree(intent, timeout);  // also refuses a root outside the group, before the search below
  size_t root_host = 0, root_place = 0;
  for (size_t g = 0; g < on_.size(); ++g)
    for (size_t p = 0; p < on_[g].size(); ++p)
      if (on_[g][p] == intent.root) root_host = g, root_place = p;
  if (size_t(place_) == root_place)
    cross_->run({step(intent, CollectiveKind::Broadcast, intent.bytes, int(root_host)), nullptr, data}, timeout);
  local_->run({step(intent, CollectiveKind::Broadcast, intent.bytes, int(root_place)), nullptr, data}, timeout);
}

}  // namespace distrun
