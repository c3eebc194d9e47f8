// A client of etcd's v3 API over its JSON gateway (HTTP or HTTPS, through libcurl): the few
// calls a rendezvous needs. Keys and values are byte strings (base64 on the wire). Each call
// goes to the endpoint that answered last, and moves on to the next one when it cannot connect
// or gets no answer, so a cluster that lost its leader or a member is ridden through until the
// call's deadline (TimeoutError then, naming every endpoint). Not thread-safe: one per thread.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace distrun::etcd {

struct KeyValue {
  std::string value;
  int64_t mod_revision = 0;  // the revision of its last write (compare_and_swap's witness)
};

/// Who this client is to etcd, as etcdctl takes it from its environment (never a command line):
/// a user, for a cluster with authentication enabled ($ETCDCTL_USER "NAME" or "NAME:PASSWORD",
/// the password else in $ETCDCTL_PASSWORD; over http:// it crosses the network in clear: use
/// https://), and for https:// the CA to trust ($ETCDCTL_CACERT, else the system's) and a
/// client certificate and its key ($ETCDCTL_CERT, $ETCDCTL_KEY) for --client-cert-auth.
struct Credentials {
  std::string user, password;
  std::string ca_cert, cert, key;  // PEM files
  /// From the ETCDCTL_ variables above; empty fields for those unset.
  static Credentials from_env();
};

class Client {
 public:
  /// `endpoints`: "host[:port]" (http), "http://host[:port]" or "https://host[:port]" (the
  /// system's CAs); the port is 2379 unless given. `timeout` bounds each call, every retry
  /// included. With a user, the client authenticates (/v3/auth/authenticate) before its first
  /// call and sends the token with each; a token etcd no longer knows (expired, or the member
  /// restarted) is replaced once per call.
  Client(std::vector<std::string> endpoints, std::chrono::milliseconds timeout,
         Credentials credentials = Credentials::from_env());
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  std::optional<KeyValue> get(const std::string& key);
  /// Puts `value`; with a lease, the key goes when the lease expires or is revoked.
  void put(const std::string& key, const std::string& value, int64_t lease = 0);
  /// Puts `value` only if `key` is absent; true when it did.
  bool create(const std::string& key, const std::string& value, int64_t lease = 0);
  /// Puts `value` only if `key` was last written at `mod_revision`; true when it did.
  bool compare_and_swap(const std::string& key, int64_t mod_revision, const std::string& value);
  /// Deletes `key`; true when it existed.
  bool remove(const std::string& key);
  /// A lease of `ttl` seconds: its id.
  int64_t grant(int ttl);
  /// Renews `lease`; false when it has expired already (its keys are gone).
  bool keep_alive(int64_t lease);
  void revoke(int64_t lease);

  /// Waits until `key` is written (put or deleted) after revision `after`, by a watch: etcd
  /// answers the moment it happens. At most `within`; true when it was written, false when the
  /// time ran out or the watch could not be held (a member down, history compacted): the caller
  /// looks again. With `range_end`, any key from `key` up to (not including) it.
  bool watch_write(const std::string& key, int64_t after, std::chrono::milliseconds within,
                   const std::string& range_end = "");
  /// watch_write(), telling a quiet watch (`within` ran out) from a broken one, and giving the
  /// revision of the last event it saw.
  struct Watched {
    enum Outcome { Written, Quiet, Broken } outcome = Broken;
    int64_t revision = 0;  // Written: the revision of its last event
  };
  Watched watch(const std::string& key, int64_t after, std::chrono::milliseconds within,
                const std::string& range_end = "");
  /// The cluster's revision at the last answer: as of when a get() found no key.
  int64_t revision() const { return revision_; }
  /// HTTP requests made so far, every try and watch included.
  int64_t requests() const { return requests_; }

  /// The local address of the last connection to etcd: this host's address as the cluster
  /// (and so the other nodes) reach it.
  const std::string& local_address() const { return local_address_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  nlohmann::json call(const std::string& path, const nlohmann::json& body);
  // One call to every member in turn until the deadline; `status` its HTTP status (401: the
  // token was refused).
  nlohmann::json try_call(const std::string& path, const std::string& request, long& status);
  void authenticate();

  Credentials credentials_;
  bool authenticated_ = false;  // a token is in the headers

  std::vector<std::string> endpoints_;
  std::chrono::milliseconds timeout_;
  size_t current_ = 0;  // the endpoint that answered last
  int64_t revision_ = 0;
  int64_t requests_ = 0;
  std::string local_address_;
  struct Curl;
  std::unique_ptr<Curl> curl_;
};

/// Base64 (RFC 4648, padded), as etcd's gateway writes bytes.
std::string base64_encode(const std::string& bytes);
/// StoreError when `text` is not base64.
std::string base64_decode(const std::string& text);

/// Splits "a:1,b:2" into its endpoints; ConfigError when empty.
std::vector<std::string> parse_endpoints(const std::string& list);

}  // namespace distrun::etcd
