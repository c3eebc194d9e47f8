// TCPStore: the store that ranks share over TCP, as torch's env:// rendezvous does. Rank 0
// (or the launcher) hosts a TCPStoreServer on MASTER_ADDR:MASTER_PORT; every rank talks to it
// through a TCPStore client. A per-job secret, when set, must open each connection.
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>

#include "distrun/core/error.hpp"
#include "distrun/store/protocol.hpp"
#include "distrun/store/store.hpp"

namespace distrun {

/// No reply in time on a connection that stands: the server's kernel holds the connection
/// (it accepted it, or it carried earlier replies) but the server does not answer, so its
/// process is stopped or stalled, or its host unreachable. A refused or reset connection is
/// not this.
class StoreSilent : public TimeoutError {
 public:
  using TimeoutError::TimeoutError;
};

/// A TCPStore::wait_any() that ended early, without an answer, because another thread of the
/// process wanted the connection: the caller waits again.
class WaitGaveWay : public TimeoutError {
 public:
  using TimeoutError::TimeoutError;
};

struct TCPStoreServerOptions {
  std::string host = "0.0.0.0";  // address to bind: the interface of MASTER_ADDR
  uint16_t port = 0;             // 0 picks a free port (see TCPStoreServer::port())
  std::string secret;            // required in each client's first frame when non-empty
  uint32_t max_frame = wire::kDefaultMaxFrame;
  size_t max_connections = 4096;  // authenticated connections (ranks, heartbeats, agents)
  /// Connections that have not proved the secret yet have a pool of their own: when it is
  /// full, the oldest (silent ones first) is closed for the newest, and a client whose
  /// handshake was cut so tries again, so strangers cannot keep a rank out.
  size_t max_unauthenticated = 256;
  std::chrono::milliseconds auth_timeout = 5s;  // to prove the secret, from accept
  /// A bound, listening TCP socket to serve on instead of binding host:port (c10d's
  /// masterListenFd). Validated (ConfigError otherwise); the server then owns and closes it.
  int listen_fd = -1;
};

/// A store server on its own thread. Serves until destroyed; one slow or malicious client
/// never stops the others (every connection is asynchronous and bounded).
class TCPStoreServer {
 public:
  /// Binds and starts serving; StoreError when the address cannot be bound (port taken).
  explicit TCPStoreServer(const TCPStoreServerOptions& options);
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  /// The port actually bound.
  uint16_t port() const;
  /// The address actually bound (numeric; "0.0.0.0" or "::" for every interface).
  const std::string& address() const;
  /// Connections currently open (for tests of limits and leaks).
  size_t connections() const;
  /// "address:port" of the first client that completed the handshake with a proof of another
  /// secret (a peer of the job given the wrong one, or someone guessing), if any.
  std::optional<std::string> wrong_secret_peer() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  std::thread thread_;
};

struct TCPStoreOptions {
  bool is_server = false;                                      // host a TCPStoreServer in this process (rank 0)
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;  // connect + every wait
  std::string secret;                                          // defaults to $DISTRUN_STORE_SECRET
  std::string bind_host;  // server only: address to bind (default: derived from host)
  int listen_fd = -1;     // server only: serve on this listening socket instead of binding
  size_t max_connections = TCPStoreServerOptions{}.max_connections;          // server only
  size_t max_unauthenticated = TCPStoreServerOptions{}.max_unauthenticated;  // server only
  /// A request with no reply in time is a TimeoutError, but the connection stays: its reply is
  /// read (and dropped) before the next request's. For a peer that must survive a network
  /// blip: TCP delivers what was sent once the link is back. Otherwise the socket is closed.
  bool keep_on_timeout = false;
};

/// A store client (and, with is_server, the server too). Thread-safe: one request at a time.
class TCPStore : public Store {
 public:
  /// Connects to host:port, retrying until options.timeout (the server may start later).
  TCPStore(const std::string& host, uint16_t port, const TCPStoreOptions& options = {});
  ~TCPStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  int64_t add_marked(const std::string& key, int64_t delta, const std::string& mark, const std::string& value) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  /// Gives way: a request of another thread on this connection ends it at once with
  /// WaitGaveWay (the server is told to end it too), so that one connection serves a thread
  /// parked in wait_any() and another making requests. The caller waits again.
  size_t wait_any(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  using Store::wait;

  /// Sets `key` for as long as this connection lives: the server removes it when the
  /// connection closes (this process died, or its host reset the connection), and then adds
  /// one to the count under `lost` when given (one read says whether any claim went).
  void claim(const std::string& key, const std::string& value, const std::string& lost = "");
  /// Adds one to the count under `key`, without a reply and without waiting: a heartbeat. A
  /// wait_any() of another thread in progress stays parked (its thread sends it).
  void beat(const std::string& key);

  /// Ends a wait_any() in progress on this connection, or the next one, at once (WaitGaveWay),
  /// from any thread; the connection stays.
  void interrupt_wait();

  /// Shuts the connection down now, from any thread: a request in flight fails at once (for a
  /// heartbeat thread stuck on a frozen server). Every later request fails too.
  void abort();

  /// Hosting: TCPStoreServer::wrong_secret_peer(); nullopt for a client.
  std::optional<std::string> wrong_secret_peer() const { return server_ ? server_->wrong_secret_peer() : std::nullopt; }

  /// The port of the server this client talks to (the bound one when hosting).
  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }

  struct Conn;

 private:
  // `gives_way`: the request (a wait) ends early when another thread wants the connection.
  std::string request(const wire::Request& r, std::chrono::milliseconds reply_timeout, bool gives_way = false);
  // An Add (with its mark or not): the count's new value.
  int64_t add_request(const wire::Request& r);
  void authenticate(const std::string& secret, std::chrono::milliseconds timeout);
  std::string handshake_step(const wire::Request& r, std::chrono::milliseconds timeout);

  std::string host_;
  uint16_t port_;
  std::unique_ptr<TCPStoreServer> server_;
  std::unique_ptr<Conn> conn_;
  std::mutex mu_;  // the connection: one thread's requests at a time
  // A wait that gives way (wait_any) and the threads it gives way to.
  std::atomic<bool> parked_{false}, interrupted_{false};
  std::atomic<int> wanting_{0};  // threads waiting for mu_ to make a request
  std::mutex way_mu_;
  std::condition_variable way_cv_;  // wanting_ fell to 0
};

}  // namespace distrun
