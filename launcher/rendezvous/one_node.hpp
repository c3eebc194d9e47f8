// One node: nothing to agree on. Every worker is on this host and reaches the workers' store
// on loopback (ProcessGroup::init does the same), so nothing outside the host can; a failure
// concerns this node alone.
#pragma once
#include "ports.hpp"
#include "rendezvous.hpp"

namespace distrun::launcher {

class OneNodeRendezvous : public Rendezvous {
 public:
  OneNodeRendezvous(const JobPlan& plan, const RendezvousOptions& options);

  Assignment join(int attempt, int restarts) override;
  std::optional<FailureRecord> watch(int /*attempt*/) override { return std::nullopt; }
  std::optional<FailureRecord> first_failure(int /*attempt*/) override { return std::nullopt; }
  std::optional<FailureRecord> report_failure(int /*attempt*/, const FailureRecord& /*mine*/) override {
    return std::nullopt;
  }
  bool leaving_is_final(int /*attempt*/) const override { return true; }
  std::optional<FailureRecord> finish(int /*attempt*/) override { return std::nullopt; }
  void acknowledge(int /*attempt*/) override {}
  void close(const std::optional<FailureRecord>& /*failure*/) override {}
  std::string restart_reason(const FailureRecord& first) const override { return first.summary(); }
  void publish(int /*attempt*/, const std::string& /*name*/, const std::string& /*text*/) override {}
  std::vector<std::optional<std::string>> gather(int /*attempt*/, const std::string& /*name*/,
                                                 std::chrono::milliseconds /*within*/) override {
    return {};
  }
  const std::vector<std::string>& node_hosts() const override { return hosts_; }
  const std::vector<int>& node_nproc() const override { return nproc_; }
  const std::string& host() const override { return hosts_.front(); }

 private:
  JobPlan plan_;
  bool hand_socket_;
  BoundPort workers_socket_;
  uint16_t workers_port_ = 0;
  std::vector<std::string> hosts_;
  std::vector<int> nproc_;
};

}  // namespace distrun::launcher
