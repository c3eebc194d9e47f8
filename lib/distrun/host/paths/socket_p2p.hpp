// Point-to-point messages over a group's sockets (socket_mesh.hpp), with torch's progress: isend
// writes what the socket takes at once and irecv posts its receive, and any wait on the group
// moves every posted message on, so `isend; recv; wait` on both ranks of an exchange, or a
// ring's `isend; irecv; wait; wait`, meet.
//
// A message is one write and one read: the sender's statement (dtype, bytes) and its payload,
// written together, and the send is done once they are written; the receiver answers nothing
// when the two statements agree, so no send waits for its receiver. When they differ (another
// size or dtype) the receive raises CollectiveMismatchError, the payload read and dropped (never
// written past the receiver's buffer), and the receiver sends the sender a refusal with both
// statements: the sender raises the same error, with the same text, at the first send or
// receive with that peer that it calls once the refusal is in (read by one of its waits), and
// that call posts nothing: it takes no message number, so the same call made again pairs with
// the receiver's next one. Which call that is depends on when the refusal is read: during any
// point-to-point wait of the sender (or a collective that reads that connection), so a call
// with that peer made before one of them has read it goes on as if there were none. It comes
// ahead of anything the receiver sends the sender later, so a sender that has received from
// the receiver since learns of it at its next call with that peer. A sender that never again
// sends to or receives from that peer does not learn of it; MPI promises less: a receive whose
// message is longer than its buffer fails with MPI_ERR_TRUNCATE at the receiver alone, and the
// send completes. A refusal that cannot be written (the sender gone) loses that connection:
// the receiver's later receives from that peer take what it sent before it left, its sends to
// it fail naming it, and its other peers go on.
#pragma once
#include <array>
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
  ~SocketP2P();
  SocketP2P(const SocketP2P&) = delete;
  SocketP2P& operator=(const SocketP2P&) = delete;

  /// `data` is host memory, held by the Work; a received message is copied on into
  /// `device_target` (when defined) once it is in. Either raises, doing nothing else, the
  /// refusal of an earlier send to the peer that has arrived since (the header).
  std::shared_ptr<Work> isend(Tensor data, int dst, uint32_t tag, std::chrono::milliseconds timeout);
  std::shared_ptr<Work> irecv(Tensor data, Tensor device_target, int src, uint32_t tag,
                              std::chrono::milliseconds timeout);

 private:
  // The key of the next message with `peer` under `tag`, each way: its number is part of it, so
  // one abandoned after a mismatch never pairs with a later one.
  uint64_t key(int peer, uint32_t tag, bool sending);
  // A peer's refusals of our sends, taken by a passive receive standing while we have sent to it.
  struct Refusals {
    std::shared_ptr<SocketMesh::Recv> recv = std::make_shared<SocketMesh::Recv>();
    std::array<uint64_t, 5> body{};  // tag, the sender's statement, the receiver's
    bool standing = false;
  };
  // Raises the next refusal from `peer` that is in (`op`: the call's name, for other errors).
  void raise_refusal(int peer, const char* op, std::chrono::milliseconds timeout);
  // Posts the passive receive for `peer`'s next refusal, unless it stands.
  void stand(int peer, const char* op, std::chrono::milliseconds timeout);

  std::shared_ptr<SocketMesh> mesh_;
  std::vector<int> global_ranks_;
  Fail fail_;
  std::map<std::pair<int, uint32_t>, uint32_t> sent_, received_;
  std::map<int, Refusals> refusals_;
};

}  // namespace distrun
