#include "distrun/host/paths/socket_p2p.hpp"

#include <array>

#include "distrun/backend/intent.hpp"
#include "distrun/core/error.hpp"

namespace distrun {

namespace {

using Kind = SocketMesh::Kind;

class SocketP2PWork : public Work {
 public:
  // `key`: the message's, which the sender's payload and the receiver's statement share.
  SocketP2PWork(std::shared_ptr<SocketMesh> mesh, SocketP2P::Fail fail, bool is_send, int peer, int sender_global,
                int receiver_global, uint32_t tag, uint64_t key, Tensor data, Tensor target,
                std::chrono::milliseconds timeout)
      : mesh_(std::move(mesh)), fail_(std::move(fail)), is_send_(is_send), peer_(peer), sender_(sender_global),
        receiver_(receiver_global), tag_(tag), data_(std::move(data)), target_(std::move(target)), timeout_(timeout) {
    mine_ = {uint64_t(data_.dtype()), uint64_t(data_.nbytes())};
    statement_out_ = std::make_shared<SocketMesh::Send>();
    statement_out_->key = {Kind::Statement, key};
    statement_out_->parts = {{reinterpret_cast<const char*>(mine_.data()), sizeof mine_}};
    statement_in_ = std::make_shared<SocketMesh::Recv>();
    statement_in_->key = {Kind::Statement, key};
    statement_in_->parts = {{reinterpret_cast<char*>(theirs_.data()), sizeof theirs_}};
    char* payload = static_cast<char*>(data_.data());
    const size_t bytes = size_t(data_.nbytes());
    if (is_send_) {
      payload_out_ = std::make_shared<SocketMesh::Send>();
      payload_out_->key = {Kind::Message, key};
      payload_out_->parts = {{payload, bytes}};
    } else {
      payload_in_ = std::make_shared<SocketMesh::Recv>();
      payload_in_->key = {Kind::Message, key};
      payload_in_->parts = {{payload, bytes}};
    }
    const auto deadline = SocketMesh::Clock::now() + timeout_;
    try {
      mesh_->post(peer_, statement_in_, deadline);
      if (payload_in_) mesh_->post(peer_, payload_in_, deadline);
      mesh_->post(peer_, statement_out_, deadline, payload_out_ != nullptr);  // one write with the payload
      if (payload_out_) mesh_->post(peer_, payload_out_, deadline);
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
            return statement_in_->done && statement_out_->done && (!payload_in_ || payload_in_->done) &&
                   (!payload_out_ || payload_out_->done);
          },
          SocketMesh::Clock::now() + t, {}, false, [&] { return std::vector<int>{peer_}; });
    } catch (const std::exception& e) {
      abandon();
      done_ = true;
      fail_(op(), e);
    }
    done_ = true;
    // The same text on both ranks, which pass the agreed error on unchanged.
    const std::string problem = disagreement();
    if (!problem.empty()) throw CollectiveMismatchError(problem);
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
  // Both ranks compare the same two statements, so both find the same message ("": they
  // agree).
  std::string disagreement() const {
    const auto& sent = is_send_ ? mine_ : theirs_;
    const auto& expected = is_send_ ? theirs_ : mine_;
    if (sent == expected) return "";
    auto what = [](const std::array<uint64_t, 2>& s) {
      return std::to_string(s[1]) + " bytes of " + (s[0] < 64 ? dtype_name(DType(s[0])) : std::string("?"));
    };
    return "send/recv from rank " + std::to_string(sender_) + " to rank " + std::to_string(receiver_) + " (tag " +
           std::to_string(tag_) + "): rank " + std::to_string(sender_) + " sends " + what(sent) + ", rank " +
           std::to_string(receiver_) + " expects " + what(expected);
  }

  std::shared_ptr<SocketMesh> mesh_;
  SocketP2P::Fail fail_;
  bool is_send_;
  int peer_, sender_, receiver_;
  uint32_t tag_;
  Tensor data_, target_;
  std::chrono::milliseconds timeout_;
  std::array<uint64_t, 2> mine_{}, theirs_{};  // statements: dtype, bytes
  // Each side sends its statement; the sender also its payload (a payload of another size
  // than the receiver's statement is read and dropped, never written past its buffer).
  std::shared_ptr<SocketMesh::Send> statement_out_, payload_out_;
  std::shared_ptr<SocketMesh::Recv> statement_in_, payload_in_;
  bool done_ = false;
};

}  // namespace

SocketP2P::SocketP2P(std::shared_ptr<SocketMesh> mesh, std::vector<int> global_ranks, Fail fail)
    : mesh_(std::move(mesh)), global_ranks_(std::move(global_ranks)), fail_(std::move(fail)) {}

uint64_t SocketP2P::key(int peer, uint32_t tag, bool sending) {
  auto& count = (sending ? sent_ : received_)[{peer, tag}];
  // The n-th message each way between two ranks travel on one connection, and each side's
  // statement of either is keyed by the message: the direction is part of the key, else the
  // receiver's statement of one would be read as the sender's of the other.
  const bool upward = sending ? mesh_->rank() < peer : peer < mesh_->rank();
  return uint64_t(tag) << 32 | (uint64_t(count++) & 0x7fffffff) << 1 | uint64_t(upward);
}

std::shared_ptr<Work> SocketP2P::isend(Tensor data, int dst, uint32_t tag, std::chrono::milliseconds timeout) {
  return std::make_shared<SocketP2PWork>(mesh_, fail_, true, dst, global_rank_of(global_ranks_, mesh_->rank()),
                                         global_rank_of(global_ranks_, dst), tag, key(dst, tag, true), std::move(data),
                                         Tensor(), timeout);
}

std::shared_ptr<Work> SocketP2P::irecv(Tensor data, Tensor device_target, int src, uint32_t tag,
                                       std::chrono::milliseconds timeout) {
  return std::make_shared<SocketP2PWork>(mesh_, fail_, false, src, global_rank_of(global_ranks_, src),
                                         global_rank_of(global_ranks_, mesh_->rank()), tag, key(src, tag, false),
                                         std::move(data), std::move(device_target), timeout);
}

}  // namespace distrun
