// Joining the job: reads the world from the environment, meets the other ranks through a
// TCPStore on MASTER_ADDR:MASTER_PORT (hosted by rank 0, as torch's env:// does), starts the
// heartbeats and creates the backend. What init_process_group() does in torch.distributed.
#pragma once
#include <memory>
#include <string>

#include "distrun/backend/backend.hpp"
#include "distrun/backend/flight_recorder.hpp"
#include "distrun/backend/liveness.hpp"
#include "distrun/env/world.hpp"
#include "distrun/store/store.hpp"

namespace distrun {

enum class BackendKind { Gloo, Nccl };

/// "gloo" / "nccl" (ConfigError otherwise).
BackendKind parse_backend(const std::string& name);

struct InitOptions {
  BackendKind backend = BackendKind::Gloo;
  std::chrono::milliseconds timeout{30000};  // every collective, and joining
  std::optional<WorldInfo> world;            // default: world_from_env()
  std::shared_ptr<Store> store;              // default: TCPStore at the master (tests pass a HashStore)
  bool heartbeats = true;                    // name dead or frozen peers in errors
};

class ProcessGroup {
 public:
  /// Joins the job. Blocks until every rank has joined or the timeout passes.
  static std::shared_ptr<ProcessGroup> init(const InitOptions& options = {});

  const WorldInfo& world() const { return world_; }
  int rank() const { return world_.rank; }
  int size() const { return world_.world_size; }
  Backend& backend() { return *backend_; }
  const std::shared_ptr<Backend>& backend_ptr() const { return backend_; }
  Store& store() { return *store_; }
  /// This rank's record of its last collectives (flight_recorder.hpp).
  FlightRecorder& flight_recorder() { return *recorder_; }

  ~ProcessGroup();

 private:
  ProcessGroup() = default;
  WorldInfo world_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Liveness> liveness_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::shared_ptr<Backend> backend_;
};

/// Creates the backend `kind` over `store` (used by init and by tests with ranks as threads).
std::shared_ptr<Backend> make_backend(BackendKind kind, std::shared_ptr<Store> store, const WorldInfo& world,
                                      std::chrono::milliseconds timeout, std::shared_ptr<Liveness> liveness);

}  // namespace distrun
