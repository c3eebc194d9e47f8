// GlooBackend: every collective of the spec on CPU tensors over a host path (host/). CUDA
// tensors are staged through host memory. A failure is translated into a distrun error that
// names the lost peer when the heartbeats tell one (see backend/liveness.hpp).
#pragma once
#include <map>
#include <memory>
#include <optional>

#include "distrun/backend/backend.hpp"
#include "distrun/backend/intent.hpp"
#include "distrun/backend/liveness.hpp"
#include "distrun/backend/reduce_kernels.hpp"
#include "distrun/host/path_policy.hpp"
#include "distrun/host/paths/socket_p2p.hpp"
#include "distrun/host/transport.hpp"
#include "distrun/store/store.hpp"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace distrun {

/// The backend's settings: the paths' (host/path_policy.hpp, read_env() reading them from the
/// environment) and its own.
struct GlooBackendOptions : PathSettings {
  std::chrono::milliseconds timeout{30000};  // default for every collective and the rendezvous
  std::string hostname;                      // local address to bind (see local_address_towards)
  std::string iface;                         // or an interface name (GLOO_SOCKET_IFNAME)
  /// The workers' secret (DISTRUN_STORE_SECRET), from which the socket path's pairs derive the
  /// key they prove on connecting; empty: a random key from the store (see socket_listener.hpp).
  /// Never written anywhere.
  std::string secret;
  /// Log the path chosen (info level, by the group's rank 0); off for the hierarchical path's
  /// own inner groups, which its line describes.
  bool log_choice = true;
};

class GlooBackend : public Backend {
 public:
  /// Joins `size` ranks through `store` (keys under its own prefix): Gloo's full mesh only where
  /// the group's path needs it (shared memory, DISTRUN_TCP=gloo); distrun's sockets connect a
  /// pair when a schedule or a point-to-point message first needs it.
  /// `liveness` (optional) names lost peers in errors. The device is shared with subgroups.
  GlooBackend(std::shared_ptr<Store> store, int rank, int size, const GlooBackendOptions& options,
              std::shared_ptr<Liveness> liveness = nullptr, std::vector<int> global_ranks = {},
              std::shared_ptr<gloo::transport::Device> device = nullptr);
  ~GlooBackend() override;

  std::string name() const override { return "gloo"; }
  /// "shm" (single-copy reads, meeting in a shared segment), "shm/tcp-sync" (single-copy
  /// reads, meeting over TCP when no segment could be mapped) or "tcp".
  std::string transport_name() const override;
  /// Every collective over the group's path (transport()): the kind's form (backend/op.hpp)
  /// says which buffers become its intent's blocks.
  void run(const CollectiveOp& op) override;
  std::shared_ptr<Work> isend(const Tensor& tensor, int dst, const SendOptions& opts) override;
  std::shared_ptr<Work> irecv(Tensor& tensor, int src, const SendOptions& opts) override;
  std::shared_ptr<Backend> new_group(const std::vector<int>& ranks) override;

  /// The path chosen for this group (the hierarchical path runs its inner groups' directly).
  CollectiveTransport& transport() { return *transport_; }

  /// Turns a failure inside a Gloo call into a distrun error naming the op, this rank and,
  /// when the heartbeats tell, the lost peer. Used by the Work objects too.
  [[noreturn]] void fail(const char* op, const std::exception& e);

 private:
  // Runs f, turning what it throws into a distrun error (fail()); a Gloo error raised once
  // `timeout` has run out is a TimeoutError (Gloo's types do not tell a timeout apart).
  template <typename F>
  void guarded(const char* op, std::chrono::milliseconds timeout, F&& f);
  // This rank's statement of the collective about to run (the transport numbers it).
  static Intent intent(CollectiveKind kind, DType dtype, uint64_t bytes, int root = -1,
                       std::optional<ReduceOp> op = {});
  // run()'s ways: the collectives of blocks (every kind but these two), all_to_all's counts,
  // and the barrier.
  void run_blocks(const CollectiveOp& op);
  void run_all_to_all(const CollectiveOp& op);
  void run_barrier(const CollectiveOp& op);
  // The path for this group (host/path_policy.hpp's make_transport), given what this backend
  // offers the paths: its store, Gloo's mesh, distrun's sockets and inner groups.
  std::unique_ptr<CollectiveTransport> choose_transport();
  // Gloo's full mesh, made by every member at the same point of choose_transport.
  void connect_gloo();
  // The group's sockets, listening once made (by every member at the same point).
  const std::shared_ptr<SocketMesh>& mesh();
  // The Gloo slots of the next point-to-point message with `peer` under `tag` (low two bits
  // free for its parts).
  uint64_t p2p_slot(int peer, uint32_t tag, bool sending);

  std::shared_ptr<Store> store_;
  GlooBackendOptions options_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;          // null unless the path needs Gloo
  std::shared_ptr<SocketMesh> mesh_;                // null unless the path is distrun's TCP
  std::unique_ptr<SocketP2P> p2p_;                  // point-to-point over mesh_
  std::unique_ptr<CollectiveTransport> transport_;  // chosen once, in the constructor
  uint32_t next_tag_ = 1;
  int groups_made_ = 0;
  // Point-to-point messages so far per (peer, tag), each way: part of every message's slot,
  // so that one abandoned after a mismatch never pairs with a later one.
  std::map<std::pair<int, uint32_t>, uint32_t> sent_, received_;
};

}  // namespace distrun
