#include "distrun/comm/process_group.hpp"

#include <signal.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <exception>
#include <thread>

#include "distrun/backend/recording_backend.hpp"
#include "distrun/config.hpp"
#include "distrun/core/error.hpp"
#include "distrun/env/netif.hpp"
#include "distrun/gloo/gloo_backend.hpp"
#include "distrun/store/hash_store.hpp"
#include "distrun/store/listen_socket.hpp"
#include "distrun/store/tcp_store.hpp"
#if DISTRUN_HAVE_NCCL
#include "distrun/nccl/device_choice.hpp"
#include "distrun/nccl/nccl_backend.hpp"
#endif

namespace distrun {

BackendKind parse_backend(const std::string& name) {
  if (name == "gloo") return BackendKind::Gloo;
  if (name == "nccl") return BackendKind::Nccl;
  throw ConfigError("unknown backend '" + name + "' (expected gloo or nccl)");
}

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The address the store server binds: MASTER_ADDR's own interface when it is ours, so the
// port is not opened on every interface.
std::string store_bind_address(const std::string& master) {
  std::string ip = resolve_host(master);
  return is_local_address(ip) ? ip : "0.0.0.0";
}

// Every rank on this host: the store need not be reachable from anywhere else.
bool one_host(const WorldInfo& w) { return w.nnodes <= 1 && w.local_world_size >= w.world_size; }

// Ranks on several hosts meet on a port others can reach: without a secret, anyone who can
// reach it could read and write the job's keys (and announce ranks that never came), so a
// direct start (srun, mpirun) must export one. distrun exports one to its workers itself.
void require_secret_across_hosts(const WorldInfo& w) {
  if (one_host(w) || !env("DISTRUN_STORE_SECRET").empty()) return;
  throw ConfigError(
      "the " + std::to_string(w.world_size) + " ranks run on " + std::to_string(std::max(w.nnodes, 2)) +
      " hosts (from the " + w.source + " variables), so rank 0's store at " + w.master_addr + ":" +
      std::to_string(w.master_port) +
      " must be closed to others: export the same DISTRUN_STORE_SECRET to every rank, e.g.\n"
      "    export DISTRUN_STORE_SECRET=$(openssl rand -hex 16)   # before srun or mpirun, which pass it on");
}

std::string seconds_str(std::chrono::milliseconds t) {
  std::ostringstream s;
  s << double(t.count()) / 1000.0 << " s";
  return s.str();
}

// Every rank checks in before the backend connects, so that a rank that never started is
// named ("rank 3 of 4 never joined") rather than reported as a missing Gloo key. Each sets its
// own key (what that message is made from) and counts itself in; the last one in opens the
// gate every rank waits on. Three requests a rank, and the server wakes each waiter once: the
// join costs O(N) in all (a wait for all N keys would cost O(N) per rank: N keys in its frame,
// each checked again at every write).
void wait_for_everyone(Store& store, const WorldInfo& w, std::chrono::milliseconds timeout) {
  auto key = [](int r) { return "distrun/joined/" + std::to_string(r); };
  const std::string gate = "distrun/joined/all";
  if (store.add_marked("distrun/joined/count", 1, key(w.rank), "1") == w.world_size) store.set(gate, "1");
  try {
    store.wait({gate}, timeout);
  } catch (const TimeoutError&) {
    std::string missing;
    int count = 0;
    for (int r = 0; r < w.world_size; ++r)
      if (!store.check({key(r)})) missing += (count++ ? ", " : "") + std::to_string(r);
    throw TimeoutError("rank" + std::string(count > 1 ? "s " : " ") + missing + " of " + std::to_string(w.world_size) +
                       " never joined at " + w.master_addr + ":" + std::to_string(w.master_port) + " within " +
                       seconds_str(timeout));
  }
}

}  // namespace

std::shared_ptr<Backend> make_backend(BackendKind kind, std::shared_ptr<Store> store, const WorldInfo& world,
                                      std::chrono::milliseconds timeout, std::shared_ptr<Liveness> liveness) {
  if (kind == BackendKind::Nccl) {
#if DISTRUN_HAVE_NCCL
    NcclBackendOptions o;
    o.timeout = timeout;
    o.device = nccl::cuda_device_for_local_rank(world.local_rank, world.local_world_size, /*exclusive=*/true);
    return std::make_shared<NcclBackend>(std::move(store), world.rank, world.world_size, o, std::move(liveness));
#else
    throw ConfigError("backend nccl: this build of distrun has no NCCL support (configure with CUDA and NCCL)");
#endif
  }
  GlooBackendOptions o;
  o.timeout = timeout;
  o.iface = env("DISTRUN_SOCKET_IFNAME").empty() ? env("GLOO_SOCKET_IFNAME") : env("DISTRUN_SOCKET_IFNAME");
  o.read_env();
  o.secret = env("DISTRUN_STORE_SECRET");
  if (o.iface.empty()) o.hostname = world.world_size == 1 ? "127.0.0.1" : local_address_towards(world.master_addr);
  return std::make_shared<GlooBackend>(std::move(store), world.rank, world.world_size, o, std::move(liveness));
}

std::shared_ptr<ProcessGroup> ProcessGroup::init(const InitOptions& options) {
  // Writing to a peer that just died must be an error naming that peer, not a silent death
  // by SIGPIPE; a program that chose its own SIGPIPE handling keeps it.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
  std::shared_ptr<ProcessGroup> pg(new ProcessGroup());
  pg->world_ = options.world ? *options.world : world_from_env();
  const WorldInfo& w = pg->world_;
  std::shared_ptr<Store> heartbeat_store;
  if (options.store) {
    pg->store_ = options.store;
    heartbeat_store = options.store;
  } else if (w.world_size == 1) {
    pg->store_ = heartbeat_store = std::make_shared<HashStore>();
  } else {
    TCPStoreOptions so;
    so.timeout = options.timeout;
    so.is_server = w.rank == 0;
    // Two connections a rank (its store and its heartbeats'), and room for more than that.
    so.max_connections = std::max<size_t>(so.max_connections, 2 * size_t(w.world_size) + 64);
    // On one host the store is bound to loopback and every rank talks to it there (the
    // launcher binds a handed socket there too), so nothing outside the host can reach it.
    const std::string store_host = one_host(w) ? "127.0.0.1" : w.master_addr;
    if (so.is_server) {
      // The launcher may have bound MASTER_PORT already and handed us the socket (c10d's
      // masterListenFd): serve on it, so the port cannot be lost to a race in between.
      ListeningSocket ls = listening_socket_from_env();
      if (ls.fd >= 0 && w.master_port != 0 && ls.port != w.master_port)
        throw ConfigError(std::string(kStoreListenFdEnv) + "=" + std::to_string(ls.fd) +
                          ": the socket is bound to port " + std::to_string(ls.port) + ", but MASTER_PORT is " +
                          std::to_string(w.master_port));
      if (ls.fd >= 0)
        so.listen_fd = ls.fd;
      else
        so.bind_host = one_host(w) ? store_host : store_bind_address(w.master_addr);
    }
    require_secret_across_hosts(w);
    auto tcp = std::make_shared<TCPStore>(store_host, w.master_port, so);
    pg->store_ = tcp;
    if (options.heartbeats) {
      TCPStoreOptions co;
      co.timeout = options.timeout;
      heartbeat_store = std::make_shared<TCPStore>(store_host, tcp->port(), co);
    }
  }
  pg->store_->set_timeout(options.timeout);
  if (w.world_size > 1) wait_for_everyone(*pg->store_, w, options.timeout);
  if (options.heartbeats && w.world_size > 1)
    pg->liveness_ = std::make_shared<Liveness>(heartbeat_store, w.rank, w.world_size);
  // Every collective goes into this rank's flight recorder: in the launcher's shared file when
  // it names one (so it can tell after a hang or a kill what each rank was doing), else in memory.
  const std::string flight_path = env(kFlightRecorderEnv);
  pg->recorder_ = flight_path.empty() ? FlightRecorder::in_memory(w.rank, w.world_size)
                                      : FlightRecorder::attach(flight_path, w.local_rank, w.rank, w.world_size);
  pg->backend_ =
      std::make_shared<RecordingBackend>(make_backend(options.backend, pg->store_, w, options.timeout, pg->liveness_),
                                         pg->recorder_);
  // As torch's init_process_group ends with a barrier: a fast rank must not start (or finish
  // and close its connections) while a slow one is still connecting its mesh.
  if (w.world_size > 1) pg->backend_->barrier({});
  return pg;
}

ProcessGroup::~ProcessGroup() {
  // Rank 0 hosts the store: keep it up until every rank is done with it, so that a fast rank 0
  // does not make the others fail on their way out. On the way out of a failure, wait less
  // (a dead peer never checks out) but long enough for the survivors' heartbeat probes, which
  // need the store to name the lost peer.
  // A store found dead or frozen (its host, rank 0, was lost) is not asked again: that would
  // only hold this rank's error for the store's timeout.
  const bool store_lost = liveness_ && liveness_->store_lost();
  if (world_.world_size > 1 && store_ && !store_lost) {
    const bool failing = std::uncaught_exceptions() > 0;
    // Close our connections now, while the store still answers: peers blocked on us then fail
    // at once and can still ask the heartbeats who was lost, instead of blaming us.
    if (failing) backend_.reset();
    try {
      store_->add("distrun/exit", 1);
      if (world_.rank == 0) {
        auto deadline =
            std::chrono::steady_clock::now() + (failing ? std::chrono::seconds(3) : std::chrono::seconds(10));
        while (store_->add("distrun/exit", 0) < world_.world_size && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(failing ? 20 : 2));
      }
    } catch (const std::exception&) {
    }
  }
  backend_.reset();
  liveness_.reset();
}

}  // namespace distrun
