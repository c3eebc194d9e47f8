#include "distrun/etcd/etcd_store.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>

#include "distrun/core/error.hpp"
#include "distrun/store/auth.hpp"
#include "distrun/store/hash_store.hpp"
#include "distrun/store/protocol.hpp"

namespace distrun::etcd {

using std::chrono::milliseconds;

namespace {

// How soon wait() and get() look again when a watch could not be held (a member down).
constexpr milliseconds kPoll{20};
// The longest one watch is held before looking again: a member that vanished without closing
// the connection (its host gone) holds a watch silently, and the look moves to another.
constexpr milliseconds kWatchSlice{1000};
constexpr size_t kTag = 32;
// changes_under()'s watch is held this long at a time, its connection included (a distant
// member over TLS may take most of the connect limit), and its thread's other requests are
// bounded alike (a failed one is tried again): the store waits about as long for that thread
// when it closes, whether etcd answers or not.
constexpr milliseconds kChangesSlice{1000};

}  // namespace

EtcdStore::EtcdStore(std::vector<std::string> endpoints, std::string secret, milliseconds request_timeout,
                     int lease_ttl, Credentials credentials)
    : secret_(std::move(secret)), lease_ttl_(lease_ttl), client_(endpoints, request_timeout, credentials),
      watcher_(endpoints, request_timeout, credentials), endpoints_(std::move(endpoints)),
      credentials_(std::move(credentials)) {
  timeout_ = request_timeout;
}

EtcdStore::~EtcdStore() {
  {
    std::lock_guard<std::mutex> l(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (renewer_.joinable()) renewer_.join();
  if (change_watch_.joinable()) change_watch_.join();
  // Claimed keys go at once, not lease_ttl later: this agent left on purpose.
  if (lease_) try {
      client_.revoke(lease_);
    } catch (const Error&) {
    }
}

std::string EtcdStore::seal(const std::string& key, const std::string& value) const {
  if (secret_.empty()) return value;
  std::string data = key;
  data.push_back('\0');
  data += value;
  unsigned char tag[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), secret_.data(), int(secret_.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), tag, &n);
  return std::string(reinterpret_cast<char*>(tag), n) + value;
}

std::string EtcdStore::open(const std::string& key, const std::string& stored) const {
  if (secret_.empty()) return stored;
  if (stored.size() < kTag || !auth::equal_in_constant_time(seal(key, stored.substr(kTag)), stored))
    throw StoreError("etcd: the value of " + key + " does not carry the job secret's tag (written by someone else)");
  return stored.substr(kTag);
}

void EtcdStore::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> l(mu_);
  client_.put(key, seal(key, value));
}

void EtcdStore::await_write(const std::string& key, int64_t revision, Clock::time_point deadline,
                            const std::string& range_end) {
  const auto left = std::min(kWatchSlice, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
  bool written = false;
  {
    std::lock_guard<std::mutex> l(watch_mu_);
    written = watcher_.watch_write(key, revision, left, range_end);
  }
  if (!written && Clock::now() < deadline) std::this_thread::sleep_for(kPoll);
}

int64_t EtcdStore::requests() {
  std::lock_guard<std::mutex> l(mu_), w(watch_mu_);
  return client_.requests() + watcher_.requests();
}

std::string EtcdStore::get(const std::string& key) {
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    int64_t revision = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto kv = client_.get(key)) return open(key, kv->value);
      revision = client_.revision();
    }
    if (Clock::now() >= deadline) throw TimeoutError("etcd: no key " + key);
    await_write(key, revision, deadline);
  }
}

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> l(mu_);
  for (;;) {
    auto kv = client_.get(key);
    int64_t v = 0;
    if (kv) try {
        v = std::stoll(open(key, kv->value));
      } catch (const std::logic_error&) {
        throw StoreError("etcd: " + key + " holds no number");
      }
    if (delta == 0) return v;
    // Optimistic: written only if nobody wrote in between, else read again.
    if (client_.compare_and_swap(key, kv ? kv->mod_revision : 0, seal(key, std::to_string(v + delta))))
      return v + delta;
  }
}

int64_t EtcdStore::changes_under(const std::string& prefix) {
  if (prefix.empty()) throw StoreError("etcd: changes under an empty prefix");
  std::lock_guard<std::mutex> l(mu_);
  if (change_watch_.joinable() && prefix != changes_prefix_)
    throw StoreError("etcd: changes under " + prefix + " asked of a store that watches " + changes_prefix_);
  if (!change_watch_.joinable()) {
    changes_prefix_ = prefix;
    // From the revision of this look on: a change before it is in what the caller reads next.
    client_.get(prefix);
    change_watch_ = std::thread([this, prefix, from = client_.revision()] { watch_changes(prefix, from); });
  }
  return watch_failed_ ? ++changes_ : changes_.load();
}

bool EtcdStore::stopping() {
  std::lock_guard<std::mutex> l(stop_mu_);
  return stopping_;
}

void EtcdStore::watch_changes(const std::string& prefix, int64_t revision) try {
  const std::string end = prefix_end(prefix);
  Client client(endpoints_, kChangesSlice, credentials_);
  // The pause after a broken watch, doubled while they keep breaking up to a slice: a member
  // that breaks every watch is not read some 50 times a second by every agent.
  milliseconds pause = kPoll;
  while (!stopping()) {
    Client::Watched w;
    try {
      w = client.watch(prefix, revision, kChangesSlice, end);
    } catch (const Error&) {
      // A login refused or out of time: as a broken watch.
    }
    if (w.outcome == Client::Watched::Quiet) {
      pause = kPoll;
      continue;
    }
    if (w.outcome == Client::Watched::Written && w.revision > revision) {
      revision = w.revision;
      ++changes_;
      pause = kPoll;
      continue;
    }
    // Broken (or an event that did not say when): watched again from now on, and the caller
    // told to read every key, which covers what the watch may have missed.
    if (stopping()) break;
    try {
      client.get(prefix);
      revision = client.revision();
      ++changes_;
    } catch (const Error&) {
      // No member answers: the caller's own reads fail too, and say so.
    }
    std::unique_lock<std::mutex> l(stop_mu_);
    stop_cv_.wait_for(l, pause, [this] { return stopping_; });
    pause = std::min(2 * pause, kChangesSlice);
  }
} catch (...) {
  // No client (libcurl, a certificate file), or anything else unforeseen: not a terminate.
  watch_failed_ = true;
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& k : keys)
    if (!client_.get(k)) return false;
  return true;
}

void EtcdStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    std::string missing;
    int64_t revision = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const auto& k : keys)
        if (!client_.get(k)) {
          missing = k;
          revision = client_.revision();
          break;
        }
    }
    if (missing.empty()) return;
    if (Clock::now() >= deadline)
      throw TimeoutError("etcd: waited " + std::to_string(timeout.count()) + " ms for " + missing);
    await_write(missing, revision, deadline);
  }
}

size_t EtcdStore::wait_any(const std::vector<std::string>& keys, milliseconds timeout) {
  if (keys.empty()) throw StoreError("etcd: a wait for any of no keys");
  const auto deadline = Clock::now() + std::min(timeout, milliseconds(wire::kMaxTimeoutMs));
  const auto [first, last] = std::minmax_element(keys.begin(), keys.end());
  const std::string past_last = *last + std::string(1, '\0');
  for (;;) {
    int64_t revision = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (client_.get(keys[i])) return i;
        // As of the first look: a key written while the others were looked at is in the watch.
        if (i == 0) revision = client_.revision();
      }
    }
    if (Clock::now() >= deadline)
      throw TimeoutError("etcd: waited " + std::to_string(timeout.count()) + " ms for any of " +
                         missing_keys(keys, [](const std::string&) { return false; }));
    await_write(*first, revision, deadline, past_last);
  }
}

std::vector<std::optional<std::string>> EtcdStore::multi_get(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::optional<std::string>> values;
  for (const auto& k : keys) {
    auto kv = client_.get(k);
    values.push_back(kv ? std::optional<std::string>(open(k, kv->value)) : std::nullopt);
  }
  return values;
}

bool EtcdStore::remove(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  return client_.remove(key);
}

int64_t EtcdStore::lease() {
  if (lease_) return lease_;
  lease_ = client_.grant(lease_ttl_);
  renewer_ = std::thread([this, timeout = client_.timeout()] { renew(endpoints_, timeout); });
  return lease_;
}

void EtcdStore::renew(std::vector<std::string> endpoints, milliseconds request_timeout) {
  Client client(std::move(endpoints), request_timeout, credentials_);  // a handle of its own: this thread's
  std::unique_lock<std::mutex> l(stop_mu_);
  while (!stop_cv_.wait_for(l, milliseconds(lease_ttl_ * 1000 / 3), [this] { return stopping_; })) {
    l.unlock();
    try {
      if (!client.keep_alive(lease_)) {
        // Lapsed: the others took this process for gone. It runs again, so it claims anew.
        // The fresh lease is this store's before any claim is made again under it, so that a
        // claim made meanwhile (under mu_) and a reader that sees a claim back both see it.
        const int64_t fresh = client.grant(lease_ttl_);
        std::vector<std::pair<std::string, std::string>> claims;
        {
          std::lock_guard<std::mutex> m(mu_);
          lease_ = fresh;
          claims = claims_;
        }
        for (const auto& [key, sealed] : claims) client.create(key, sealed, fresh);
      }
    } catch (const Error&) {
      // Tried again at the next tick; meanwhile the lease runs down, as for a lost host.
    }
    l.lock();
  }
}

void EtcdStore::claim(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> l(mu_);
  claims_.emplace_back(key, seal(key, value));
  client_.put(key, claims_.back().second, lease());
}

bool EtcdStore::set_if_absent(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> l(mu_);
  return client_.create(key, seal(key, value));
}

bool EtcdStore::claim_if_absent(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> l(mu_);
  const std::string sealed = seal(key, value);
  if (!client_.create(key, sealed, lease())) return false;
  claims_.emplace_back(key, sealed);
  return true;
}

}  // namespace distrun::etcd
