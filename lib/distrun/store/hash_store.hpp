// An in-process store for tests and single-process worlds (ranks as threads).
#pragma once
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>

#include "distrun/store/store.hpp"

namespace distrun {

class HashStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  size_t wait_any(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  using Store::wait;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
};

/// Parses the decimal integer stored by add(); a StoreError when `value` is not one.
int64_t parse_counter(const std::string& key, const std::string& value);
/// value + delta, or a StoreError naming `key` when the sum does not fit in an int64.
int64_t checked_add(const std::string& key, int64_t value, int64_t delta);
/// Names the keys of `keys` that `has` says are missing, for timeout messages.
std::string missing_keys(const std::vector<std::string>& keys, const std::function<bool(const std::string&)>& has);

}  // namespace distrun
