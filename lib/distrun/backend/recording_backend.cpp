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

template <typename F>
void RecordingBackend::record(const char* op, const Tensor* t, F&& f, int peer) {
  const uint64_t seq = peer < 0 ? ++seq_ : seq_;
  const uint64_t h =
      recorder_->start(op, group_, seq, t ? int64_t(t->nbytes()) : 0, t ? dtype_name(t->dtype()) : "", peer);
  try {
    f();
  } catch (...) {
    recorder_->finish(h, FlightState::Failed);
    throw;
  }
  recorder_->finish(h, FlightState::Completed);
}

void RecordingBackend::broadcast(Tensor& t, const BroadcastOptions& o) {
  record("broadcast", &t, [&] { inner_->broadcast(t, o); });
}
void RecordingBackend::all_reduce(Tensor& t, const AllreduceOptions& o) {
  record("all_reduce", &t, [&] { inner_->all_reduce(t, o); });
}
void RecordingBackend::all_reduce_coalesced(std::vector<Tensor>& ts, const AllreduceCoalescedOptions& o) {
  record("all_reduce_coalesced", ts.empty() ? nullptr : &ts.front(), [&] { inner_->all_reduce_coalesced(ts, o); });
}
void RecordingBackend::reduce(Tensor& t, const ReduceOptions& o) {
  record("reduce", &t, [&] { inner_->reduce(t, o); });
}
void RecordingBackend::all_gather(const Tensor& in, Tensor& out, const AllgatherOptions& o) {
  record("all_gather", &in, [&] { inner_->all_gather(in, out, o); });
}
void RecordingBackend::gather(const Tensor& in, Tensor& out, const GatherOptions& o) {
  record("gather", &in, [&] { inner_->gather(in, out, o); });
}
void RecordingBackend::scatter(const Tensor& in, Tensor& out, const ScatterOptions& o) {
  record("scatter", &out, [&] { inner_->scatter(in, out, o); });
}
void RecordingBackend::reduce_scatter(const Tensor& in, Tensor& out, const ReduceScatterOptions& o) {
  record("reduce_scatter", &in, [&] { inner_->reduce_scatter(in, out, o); });
}
void RecordingBackend::all_to_all(const Tensor& in, Tensor& out, const AllToAllOptions& o) {
  record("all_to_all", &in, [&] { inner_->all_to_all(in, out, o); });
}
void RecordingBackend::send(const Tensor& t, int dst, const SendOptions& o) {
  record(
      "send", &t, [&] { inner_->send(t, dst, o); }, dst);
}
void RecordingBackend::recv(Tensor& t, int src, const SendOptions& o) {
  record(
      "recv", &t, [&] { inner_->recv(t, src, o); }, src);
}
std::shared_ptr<Work> RecordingBackend::isend(const Tensor& t, int dst, const SendOptions& o) {
  const uint64_t h = recorder_->start("isend", group_, seq_, int64_t(t.nbytes()), dtype_name(t.dtype()), dst);
  try {
    return std::make_shared<RecordingWork>(inner_->isend(t, dst, o), recorder_, h);
  } catch (...) {
    recorder_->finish(h, FlightState::Failed);
    throw;
  }
}
std::shared_ptr<Work> RecordingBackend::irecv(Tensor& t, int src, const SendOptions& o) {
  const uint64_t h = recorder_->start("irecv", group_, seq_, int64_t(t.nbytes()), dtype_name(t.dtype()), src);
  try {
    return std::make_shared<RecordingWork>(inner_->irecv(t, src, o), recorder_, h);
  } catch (...) {
    recorder_->finish(h, FlightState::Failed);
    throw;
  }
}
void RecordingBackend::barrier(const BarrierOptions& o) {
  record("barrier", nullptr, [&] { inner_->barrier(o); });
}

std::shared_ptr<Backend> RecordingBackend::new_group(const std::vector<int>& ranks) {
  // Numbered on every rank, members or not, so the names agree across ranks.
  const std::string name = (group_ == "world" ? "g" : group_ + ".") + std::to_string(++groups_made_);
  auto sub = inner_->new_group(ranks);
  if (!sub) return nullptr;
  return std::make_shared<RecordingBackend>(std::move(sub), recorder_, name);
}

}  // namespace distrun
