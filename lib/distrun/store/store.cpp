#include "distrun/store/store.hpp"

#include <thread>

#include "distrun/core/error.hpp"
#include "distrun/store/hash_store.hpp"
#include "distrun/store/protocol.hpp"

namespace distrun {

size_t Store::wait_any(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::min(timeout, std::chrono::milliseconds(wire::kMaxTimeoutMs));
  for (;;) {
    for (size_t i = 0; i < keys.size(); ++i)
      if (check({keys[i]})) return i;
    if (std::chrono::steady_clock::now() >= deadline)
      throw TimeoutError("store: timed out after " + std::to_string(timeout.count()) +
                         " ms waiting for any of key(s) " +
                         missing_keys(keys, [](const std::string&) { return false; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int64_t Store::add_marked(const std::string& key, int64_t delta, const std::string& mark, const std::string& value) {
  const int64_t count = add(key, delta);
  set(mark, value);
  return count;
}

std::vector<std::optional<std::string>> Store::multi_get(const std::vector<std::string>& keys) {
  std::vector<std::optional<std::string>> values;
  for (const auto& key : keys) values.push_back(check({key}) ? std::optional<std::string>(get(key)) : std::nullopt);
  return values;
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  timeout_ = inner_->timeout();
}

std::vector<std::string> PrefixStore::k(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys) out.push_back(k(key));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) { inner_->set(k(key), value); }
std::string PrefixStore::get(const std::string& key) {
  // The inner store's get waits with its own timeout; honour ours by waiting first.
  inner_->wait({k(key)}, timeout_);
  return inner_->get(k(key));
}
int64_t PrefixStore::add(const std::string& key, int64_t delta) { return inner_->add(k(key), delta); }
int64_t PrefixStore::add_marked(const std::string& key, int64_t delta, const std::string& mark,
                                const std::string& value) {
  return inner_->add_marked(k(key), delta, k(mark), value);
}
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) { inner_->wait(k(keys), t); }
bool PrefixStore::check(const std::vector<std::string>& keys) { return inner_->check(k(keys)); }
bool PrefixStore::remove(const std::string& key) { return inner_->remove(k(key)); }
size_t PrefixStore::wait_any(const std::vector<std::string>& keys, std::chrono::milliseconds t) {
  return inner_->wait_any(k(keys), t);
}
std::vector<std::optional<std::string>> PrefixStore::multi_get(const std::vector<std::string>& keys) {
  return inner_->multi_get(k(keys));
}

int64_t parse_counter(const std::string& key, const std::string& value) {
  try {
    size_t used = 0;
    int64_t v = std::stoll(value, &used);
    if (used == value.size()) return v;
  } catch (const std::exception&) {
  }
  throw StoreError("store key '" + key + "' holds a non-integer value; add() needs a counter");
}

int64_t checked_add(const std::string& key, int64_t value, int64_t delta) {
  int64_t sum;
  if (__builtin_add_overflow(value, delta, &sum))
    throw StoreError("store key '" + key + "': adding " + std::to_string(delta) + " to " + std::to_string(value) +
                     " overflows a 64-bit counter");
  return sum;
}

std::string missing_keys(const std::vector<std::string>& keys, const std::function<bool(const std::string&)>& has) {
  std::string s;
  for (const auto& key : keys)
    if (!has(key)) s += (s.empty() ? "'" : ", '") + key + "'";
  return s;
}

void HashStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

std::string HashStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::lock_guard<std::mutex> lock(mu_);
  return data_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    v = checked_add(key, it == data_.end() ? 0 : parse_counter(key, it->second), delta);
    data_[key] = std::to_string(v);
  }
  cv_.notify_all();
  return v;
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  timeout = std::min(timeout, std::chrono::milliseconds(wire::kMaxTimeoutMs));  // no deadline overflow
  std::unique_lock<std::mutex> lock(mu_);
  auto has = [&](const std::string& key) { return data_.count(key) > 0; };
  auto all = [&] {
    for (const auto& key : keys)
      if (!has(key)) return false;
    return true;
  };
  if (!cv_.wait_for(lock, timeout, all))
    throw TimeoutError("store: timed out after " + std::to_string(timeout.count()) + " ms waiting for key(s) " +
                       missing_keys(keys, has));
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& key : keys)
    if (!data_.count(key)) return false;
  return true;
}

size_t HashStore::wait_any(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  timeout = std::min(timeout, std::chrono::milliseconds(wire::kMaxTimeoutMs));
  std::unique_lock<std::mutex> lock(mu_);
  size_t found = keys.size();
  auto any = [&] {
    for (found = 0; found < keys.size(); ++found)
      if (data_.count(keys[found])) return true;
    return false;
  };
  if (!cv_.wait_for(lock, timeout, any))
    throw TimeoutError("store: timed out after " + std::to_string(timeout.count()) + " ms waiting for any of key(s) " +
                       missing_keys(keys, [](const std::string&) { return false; }));
  return found;
}

std::vector<std::optional<std::string>> HashStore::multi_get(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::optional<std::string>> values;
  for (const auto& key : keys) {
    auto it = data_.find(key);
    values.push_back(it == data_.end() ? std::nullopt : std::optional<std::string>(it->second));
  }
  return values;
}

bool HashStore::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

}  // namespace distrun
