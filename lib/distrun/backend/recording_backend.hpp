// A Backend that records every operation of the Backend it wraps into the rank's flight
// recorder (flight_recorder.hpp) and otherwise just forwards: one home for the recording,
// whatever the backend (Gloo, NCCL). ProcessGroup::init wraps the world's backend; groups made
// with new_group() are wrapped in turn, numbered in creation order ("g1", "g1.1", ...), which
// every rank shares because every rank must create groups in the same order.
#pragma once
#include <memory>
#include <string>

#include "distrun/backend/backend.hpp"
#include "distrun/backend/flight_recorder.hpp"

namespace distrun {

class RecordingBackend : public Backend {
 public:
  RecordingBackend(std::shared_ptr<Backend> inner, std::shared_ptr<FlightRecorder> recorder,
                   std::string group = "world");

  /// The wrapped backend.
  Backend& inner() { return *inner_; }
  const std::shared_ptr<FlightRecorder>& recorder() const { return recorder_; }

  std::string name() const override { return inner_->name(); }
  Device tensor_device() const override { return inner_->tensor_device(); }
  std::string transport_name() const override { return inner_->transport_name(); }
  void run(const CollectiveOp& op) override;
  std::shared_ptr<Work> isend(const Tensor& tensor, int dst, const SendOptions& opts) override;
  std::shared_ptr<Work> irecv(Tensor& tensor, int src, const SendOptions& opts) override;
  void begin_timed() override { inner_->begin_timed(); }
  void mark() override { inner_->mark(); }
  std::vector<double> end_timed(std::chrono::milliseconds timeout) override { return inner_->end_timed(timeout); }
  std::shared_ptr<Backend> new_group(const std::vector<int>& ranks) override;

 private:
  // Starts `inner_`'s point-to-point operation `op` and records it until its Work is waited for.
  template <typename F>
  std::shared_ptr<Work> record_p2p(const char* op, const Tensor& t, int peer, F&& start);

  std::shared_ptr<Backend> inner_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::string group_;
  uint64_t seq_ = 0;
  int groups_made_ = 0;
};

}  // namespace distrun
