#include "distrun/backend/recording_backend.hpp"

namespace distrun {

namespace {

// Marks the record completed when the operation is waited for successfully.
class RecordingWork : public Work {
 public:
  RecordingWork(std::shared_ptr<Work> inner, std::shared_ptr<FlightRecorder> rec, uint64_t handle)
      : inner_(std::move(inner)), rec_(std::move(rec)), handle_(handle) {}
  void wait(std::chrono::milliseconds timeout) override {
    try {
      inner_->wait(timeout);
    } catch (...) {
      rec_->finish(handle_, FlightState::Failed);
      throw;
    }
    rec_->finish(handle_, FlightState::Completed);
  }
  bool is_completed() override { return inner_->is_completed(); }

 private:
  std::shared_ptr<Work> inner_;
  std::shared_ptr<FlightRecorder> rec_;
  uint64_t handle_;
};

}  // namespace

RecordingBackend::RecordingBackend(std::shared_ptr<Backend> inner, std::shared_ptr<FlightRecorder> recorder,
                                   std::string group)
    : Backend(inner->rank(), inner->size(), inner->global_ranks()), inner_(std::move(inner)),
      recorder_(std::move(recorder)), group_(std::move(group)) {}

void RecordingBackend::run(const CollectiveOp& op) {
  const Tensor* t = op.block();
  const uint64_t h = recorder_->start(collective_name(op.kind), group_, ++seq_, t ? int64_t(t->nbytes()) : 0,
                                      t ? dtype_name(t->dtype()) : "", -1);
  try {
    inner_->run(op);
  } catch (...) {
    recorder_->finish(h, FlightState::Failed);
    throw;
  }
  recorder_->finish(h, FlightState::Completed);
}

template <typename F>
std::shared_ptr<Work> RecordingBackend::record_p2p(const char* op, const Tensor& t, int peer, F&& start) {
  const uint64_t h = recorder_->start(op, group_, seq_, int64_t(t.nbytes()), dtype_name(t.dtype()), peer);
  try {
    return std::make_shared<RecordingWork>(start(), recorder_, h);
  } catch (...) {
    recorder_->finish(h, FlightState::Failed);
    throw;
  }
}

std::shared_ptr<Work> RecordingBackend::isend(const Tensor& t, int dst, const SendOptions& o) {
  return record_p2p("send", t, dst, [&] { return inner_->isend(t, dst, o); });
}
std::shared_ptr<Work> RecordingBackend::irecv(Tensor& t, int src, const SendOptions& o) {
  return record_p2p("recv", t, src, [&] { return inner_->irecv(t, src, o); });
}

std::shared_ptr<Backend> RecordingBackend::new_group(const std::vector<int>& ranks) {
  // Numbered on every rank, members or not, so the names agree across ranks.
  const std::string name = (group_ == "world" ? "g" : group_ + ".") + std::to_string(++groups_made_);
  auto sub = inner_->new_group(ranks);
  if (!sub) return nullptr;
  return std::make_shared<RecordingBackend>(std::move(sub), recorder_, name);
}

}  // namespace distrun
