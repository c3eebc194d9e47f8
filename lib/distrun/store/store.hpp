// The key-value store that ranks meet through, in c10d's vocabulary: set/get/add/wait with
// timeouts. Values are byte strings (std::string used as a byte container).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace distrun {

using namespace std::chrono_literals;

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout = 300s;

  virtual ~Store() = default;

  /// Stores `value` under `key`, waking anyone waiting for it.
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// The value of `key`, waiting up to timeout() for it to appear (TimeoutError after).
  virtual std::string get(const std::string& key) = 0;
  /// Atomically adds `delta` to the integer under `key` (0 when absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Adds `delta` under `key`, as add(), then sets `mark` to `value` (not when the add failed):
  /// a rank joining a barrier counts itself in and marks itself. One request to a TCPStore
  /// (this default: two).
  virtual int64_t add_marked(const std::string& key, int64_t delta, const std::string& mark, const std::string& value);
  /// Waits until every key exists, up to `timeout` (TimeoutError naming the missing keys).
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  /// True when every key exists, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// Removes `key`; true when it existed.
  virtual bool remove(const std::string& key) = 0;
  /// Waits until any of `keys` exists, up to `timeout` (TimeoutError naming them); the index
  /// of the first of them that does. This default looks every 10 ms; a store that can be told
  /// of a write (TCPStore, HashStore) waits for it instead.
  virtual size_t wait_any(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  /// The values of `keys` as they stand, nullopt for each absent one, without waiting. One
  /// request to a TCPStore; this default asks key by key.
  virtual std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys);

  /// Waits for `keys` with the store's own timeout.
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

/// Keeps groups and restart attempts apart: every key is prefixed with "<prefix>/".
class PrefixStore : public Store {
 public:
  /// Wraps `inner`; keys become "<prefix>/<key>". Inherits inner's timeout.
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  int64_t add_marked(const std::string& key, int64_t delta, const std::string& mark, const std::string& value) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  size_t wait_any(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  using Store::wait;

 private:
  std::string k(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> k(const std::vector<std::string>& keys) const;
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace distrun
