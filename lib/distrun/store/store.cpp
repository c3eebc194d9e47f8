#include "distrun/store/store.hpp"

#include "distrun/core/error.hpp"
#include "distrun/store/hash_store.hpp"
#include "distrun/store/protocol.hpp"

namespace distrun {

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
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) { inner_->wait(k(keys), t); }
bool PrefixStore::check(const std::vector<std::string>& keys) { return inner_->check(k(keys)); }
bool PrefixStore::remove(const std::string& key) { return inner_->remove(k(key)); }

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

bool HashStore::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

}  // namespace distrun
