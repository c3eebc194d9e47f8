// Point-to-point messages over a group's sockets (socket_mesh.hpp), with torch's progress: isend
// writes what the socket takes at once and irecv posts its receive, and any wait on the group
// moves every posted message on, so `isend; recv; wait` on both ranks of an exchange, or a
// ring's `isend; irecv; wait; wait`, meet.
//
// Each side sends its statement (dtype, bytes) as it posts, the sender its payload right after,
// in the same write: each side compares the two statements, so a disagreement (another size or
// dtype) is the same CollectiveMismatchError on both ranks, and a payload of another size is
// read and dropped, never written past the receiver's buffer. One write each way, no handshake.
#pragma once
#include <map>
#include <memory>

#include "distrun/backend/backend.hpp"
#include "distrun/host/paths/socket_mesh.hpp"

namespace distrun {

class SocketP2P {
 public:
  /// `fail` turns an error into the group's (naming the op and, when known, the lost peer).
  using Fail = std::function<void(const char* op, const std::exception& e)>;
  SocketP2P(std::shared_ptr<SocketMesh> mesh, std::vector<int> global_ranks, Fail fail);

  /// `data` is host memory, held by the Work; a received message is copied on into
  /// `device_target` (when defined) once it is in.
  std::shared_ptr<Work> isend(Tensor data, int dst, uint32_t tag, std::chrono::milliseconds timeout);
  std::shared_ptr<Work> irecv(Tensor data, Tensor device_target, int src, uint32_t tag,
                              std::chrono::milliseconds timeout);

 private:
  // The key of the next message with `peer` under `tag`, each way: its number is part of it, so
  // one abandoned after a mismatch never pairs with a later one.
  uint64_t key(int peer, uint32_t tag, bool sending);

  std::shared_ptr<SocketMesh> mesh_;
  std::vector<int> global_ranks_;
  Fail fail_;
  std::map<std::pair<int, uint32_t>, uint32_t> sent_, received_;
};

}  // namespace distrun
