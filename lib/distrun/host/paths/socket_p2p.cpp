#include "distrun/host/paths/socket_p2p.hpp"

#include "distrun/backend/intent.hpp"
#include "distrun/core/error.hpp"

namespace distrun {

namespace {

using Kind = SocketMesh::Kind;
using Statement = std::array<uint64_t, 2>;  // dtype, bytes

// The refusals on a connection are the receiver's alone (the other way's are read by the other
// rank), one at a time in order: one key serves them all.
constexpr SocketMesh::Key kRefusal{Kind::Refusal, 0};

// The same text on both ranks, which pass it on unchanged.
std::string disagreement(int sender, int receiver, uint64_t tag, const Statement& sent, const Statement& expected) {
  auto what = [](const Statement& s) {
    return std::to_string(s[1]) + " bytes of " + (s[0] < 64 ? dtype_name(DType(s[0])) : std::string("?"));
  };
  return "send/recv from rank " + std::to_string(sender) + " to rank " + std::to_string(receiver) + " (tag " +
         std::to_string(tag) + "): rank " + std::to_string(sender) + " sends " + what(sent) + ", rank " +
         std::to_string(receiver) + " expects " + what(expected);
}

class SocketP2PWork : public Work {
 public:
  // `key`: the message's, which its statement and payload share.
  SocketP2PWork(std::shared_ptr<SocketMesh> mesh, SocketP2P::Fail fail, bool is_send, int peer, int sender_global,
                int receiver_global, uint32_t tag, uint64_t key, Tensor data, Tensor target,
                std::chrono::milliseconds timeout)
      : mesh_(std::move(mesh)), fail_(std::move(fail)), is_send_(is_send), peer_(peer), sender_(sender_global),
        receiver_(receiver_global), tag_(tag), data_(std::move(data)), target_(std::move(target)), timeout_(timeout) {
    mine_ = {uint64_t(data_.dtype()), uint64_t(data_.nbytes())};
    char* payload = static_cast<char*>(data_.data());
    const size_t bytes = size_t(data_.nbytes());
    const auto deadline = SocketMesh::Clock::now() + timeout_;
    try {
      if (is_send_) {
        statement_out_ = std::make_shared<SocketMesh::Send>();
        statement_out_->key = {Kind::Statement, key};
        statement_out_->parts = {{reinterpret_cast<const char*>(mine_.data()), sizeof mine_}};
        payload_out_ = std::make_shared<SocketMesh::Send>();
        payload_out_->key = {Kind::Message, key};
        payload_out_->parts = {{payload, bytes}};
        mesh_->post(peer_, statement_out_, deadline, true);  // one write with the payload
        mesh_->post(peer_, payload_out_, deadline);
      } else {
        statement_in_ = std::make_shared<SocketMesh::Recv>();
        statement_in_->key = {Kind::Statement, key};
        statement_in_->parts = {{reinterpret_cast<char*>(theirs_.data()), sizeof theirs_}};
        payload_in_ = std::make_shared<SocketMesh::Recv>();
        payload_in_->key = {Kind::Message, key};
        payload_in_->parts = {{payload, bytes}};
        mesh_->post(peer_, statement_in_, deadline);
        mesh_->post(peer_, payload_in_, deadline);
      }
    } catch (const std::exception& e) {
      abandon();
      fail_(op(), e);
    }
  }
  ~SocketP2PWork() override {
    if (!done_) abandon();
  }

  void wait(std::chrono::milliseconds timeout) override {
    if (done_) return;
    const auto t = timeout.count() > 0 ? timeout : timeout_;
    try {
      mesh_->progress(
          [&] {
            return is_send_ ? statement_out_->done && payload_out_->done : statement_in_->done && payload_in_->done;
          },
          SocketMesh::Clock::now() + t, {}, false, [&] { return std::vector<int>{peer_}; });
      if (is_send_)
        for (const auto* s : {&statement_out_, &payload_out_})
          if (*s) mesh_->raise_failed(peer_, **s);
    } catch (const std::exception& e) {
      abandon();
      done_ = true;
      fail_(op(), e);
    }
    done_ = true;
    if (!is_send_ && theirs_ != mine_) refuse();
    if (target_.defined()) target_.copy_from(data_);
  }
  bool is_completed() override { return done_; }

 private:
  const char* op() const { return is_send_ ? "send" : "recv"; }
  void abandon() {
    for (auto* s : {&statement_out_, &payload_out_})
      if (*s) mesh_->abandon(peer_, *s);
    for (auto* r : {&statement_in_, &payload_in_})
      if (*r) mesh_->abandon(peer_, *r);
  }
  // Tells the sender (socket_p2p.hpp), then raises the error here.
  [[noreturn]] void refuse() {
    const std::array<uint64_t, 5> body{tag_, theirs_[0], theirs_[1], mine_[0], mine_[1]};
    auto refusal = std::make_shared<SocketMesh::Send>();
    refusal->key = kRefusal;
    refusal->parts = {{reinterpret_cast<const char*>(body.data()), sizeof body}};
    mesh_->detach(refusal);  // its own bytes: written on later progress should the socket be full
    try {
      mesh_->post(peer_, refusal, SocketMesh::Clock::now() + timeout_);
    } catch (const std::exception&) {
      // The sender is gone or cut off: it cannot learn of it (the mesh keeps no send to it
      // queued), and this rank's error is the mismatch.
    }
    throw CollectiveMismatchError(disagreement(sender_, receiver_, tag_, theirs_, mine_));
  }

  std::shared_ptr<SocketMesh> mesh_;
  SocketP2P::Fail fail_;
  bool is_send_;
  int peer_, sender_, receiver_;
  uint32_t tag_;
  Tensor data_, target_;
  std::chrono::milliseconds timeout_;
  Statement mine_{}, theirs_{};
  // The sender's statement and payload, out or in (a payload of another size than the
  // receiver's statement is read and dropped, never written past its buffer).
  std::shared_ptr<SocketMesh::Send> statement_out_, payload_out_;
  std::shared_ptr<SocketMesh::Recv> statement_in_, payload_in_;
  bool done_ = false;
};

}  // namespace

SocketP2P::SocketP2P(std::shared_ptr<SocketMesh> mesh, std::vector<int> global_ranks, Fail fail)
    : mesh_(std::move(mesh)), global_ranks_(std::move(global_ranks)), fail_(std::move(fail)) {}

SocketP2P::~SocketP2P() {
  for (auto& [peer, r] : refusals_)
    if (r.standing) mesh_->abandon(peer, r.recv);
}

uint64_t SocketP2P::key(int peer, uint32_t tag, bool sending) {
  // A rank reads only the messages its peer sends on their connection: no direction in it.
  auto& count = (sending ? sent_ : received_)[{peer, tag}];
  return uint64_t(tag) << 32 | uint64_t(count++);
}

void SocketP2P::raise_refusal(int peer, const char* op, std::chrono::milliseconds timeout) {
  auto it = refusals_.find(peer);
  if (it == refusals_.end()) return;  // nothing sent to it
  Refusals& r = it->second;
  stand(peer, op, timeout);  // may take one kept aside
  if (!r.recv->done) return;
  r.standing = false;
  throw CollectiveMismatchError(disagreement(global_rank_of(global_ranks_, mesh_->rank()),
                                             global_rank_of(global_ranks_, peer), r.body[0], {r.body[1], r.body[2]},
                                             {r.body[3], r.body[4]}));
}

void SocketP2P::stand(int peer, const char* op, std::chrono::milliseconds timeout) {
  Refusals& r = refusals_[peer];
  if (r.standing) return;
  r.recv->key = kRefusal;
  r.recv->passive = true;
  r.recv->parts = {{reinterpret_cast<char*>(r.body.data()), sizeof r.body}};
  try {
    mesh_->post(peer, r.recv, SocketMesh::Clock::now() + timeout);
    r.standing = true;
  } catch (const std::exception& e) {
    fail_(op, e);
  }
}

std::shared_ptr<Work> SocketP2P::isend(Tensor data, int dst, uint32_t tag, std::chrono::milliseconds timeout) {
  raise_refusal(dst, "send", timeout);
  stand(dst, "send", timeout);
  return std::make_shared<SocketP2PWork>(mesh_, fail_, true, dst, global_rank_of(global_ranks_, mesh_->rank()),
                                         global_rank_of(global_ranks_, dst), tag, key(dst, tag, true), std::move(data),
                                         Tensor(), timeout);
}

std::shared_ptr<Work> SocketP2P::irecv(Tensor data, Tensor device_target, int src, uint32_t tag,
                                       std::chrono::milliseconds timeout) {
  raise_refusal(src, "recv", timeout);
  return std::make_shared<SocketP2PWork>(mesh_, fail_, false, src, global_rank_of(global_ranks_, src),
                                         global_rank_of(global_ranks_, mesh_->rank()), tag, key(src, tag, false),
                                         std::move(data), std::move(device_target), timeout);
}

}  // namespace distrun
