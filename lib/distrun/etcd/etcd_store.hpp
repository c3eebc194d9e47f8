// The Store (set/get/add/wait) kept in etcd, for agents that must outlive any one host. With
// a secret, every value is stored behind an HMAC-SHA256 tag over its key and value under that
// secret, so a value that anyone without the secret wrote (or moved from another key) is
// refused (StoreError) rather than believed; etcd's own access control still decides who may
// write at all (a stranger with access can delete keys, but cannot forge them).
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "distrun/etcd/etcd_client.hpp"
#include "distrun/store/store.hpp"

namespace distrun::etcd {

class EtcdStore : public Store {
 public:
  using Clock = std::chrono::steady_clock;
  /// `lease_ttl`: seconds a claimed key outlives this process (or a freeze of it).
  EtcdStore(std::vector<std::string> endpoints, std::string secret, std::chrono::milliseconds request_timeout,
            int lease_ttl = 3, Credentials credentials = Credentials::from_env());
  ~EtcdStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  /// Told by one watch over the range that spans the keys (a write of another key in it is
  /// one look more), not by looking again and again.
  size_t wait_any(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  using Store::wait;

  /// Sets `key` only when it is absent; true when this call did.
  bool set_if_absent(const std::string& key, const std::string& value);
  /// Sets `key` for as long as this process lives and runs: it is bound to a lease that a
  /// thread of this store renews, so the key goes lease_ttl seconds after a crash or a freeze.
  /// A lease found lapsed (this process was frozen, or etcd unreachable, for longer) is replaced
  /// and every claim made again where it is still absent.
  void claim(const std::string& key, const std::string& value);
  /// As claim(), but only when `key` is absent; true when this process got it.
  bool claim_if_absent(const std::string& key, const std::string& value);

  /// A count that moves whenever a key under `prefix` is written or deleted (a claim's lease
  /// lapsed, say) after the first call, told by one watch that a thread of this store holds,
  /// so a caller that reads the keys again only when it moved reads nothing while nothing
  /// changes. It moves too when the watch broke (a member down, history compacted), and
  /// events may have been missed. One prefix per store.
  int64_t changes_under(const std::string& prefix);

  /// This host's address as the etcd cluster sees it (see Client::local_address()).
  const std::string& local_address() const { return client_.local_address(); }
  /// The lease the claims are bound to now (0 before the first claim).
  int64_t lease_id() const { return lease_; }
  /// HTTP requests made to etcd so far (the claims' renewals left out).
  int64_t requests();

 private:
  std::string seal(const std::string& key, const std::string& value) const;
  std::string open(const std::string& key, const std::string& stored) const;
  // Waits until `key`, absent at `revision`, is written, at most a watch slice or until
  // `deadline` (the caller looks again either way).
  void await_write(const std::string& key, int64_t revision, Clock::time_point deadline,
                   const std::string& range_end = "");
  int64_t lease();
  void renew(std::vector<std::string> endpoints, std::chrono::milliseconds request_timeout);
  void watch_changes(const std::string& prefix, int64_t revision, std::chrono::milliseconds request_timeout);
  bool stopping();

  std::string secret_;
  int lease_ttl_;
  std::mutex mu_;
  Client client_;
  // The waits' own connection, held open by a watch while another thread uses client_.
  std::mutex watch_mu_;
  Client watcher_;
  std::atomic<int64_t> lease_{0};
  std::vector<std::pair<std::string, std::string>> claims_;  // (key, sealed value), under mu_
  std::vector<std::string> endpoints_;
  Credentials credentials_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread renewer_;
  std::atomic<int64_t> changes_{0};
  std::thread change_watch_;  // started by changes_under(), under mu_
};

}  // namespace distrun::etcd
