#include "distrun/backend/liveness.hpp"

#include <sstream>

#include "distrun/core/error.hpp"
#include "distrun/store/tcp_store.hpp"

namespace distrun {

namespace {
std::string key(int rank) { return "distrun/hb/" + std::to_string(rank); }
std::string failed_key(int rank) { return "distrun/failed/" + std::to_string(rank); }
}  // namespace

Liveness::Liveness(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds interval)
    : store_(std::move(store)), rank_(rank), size_(size), interval_(interval) {
  store_->add(key(rank_), 1);
  thread_ = std::thread([this] { run(); });
}

Liveness::~Liveness() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // A heartbeat stuck on a frozen store would hold the join for the store's whole timeout.
  if (store_lost_)
    if (auto* tcp = dynamic_cast<TCPStore*>(store_.get())) tcp->abort();
  thread_.join();
}

void Liveness::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait_for(lock, interval_, [this] { return stop_ || poke_; });
    if (stop_) return;
    poke_ = false;
    lock.unlock();
    bool ok = true;
    try {
      store_->add(key(rank_), 1);
    } catch (const std::exception&) {
      ok = false;  // the store is gone (its host died): the collective that fails next reports it
    }
    lock.lock();
    if (!ok) {
      store_failed_ = true;
      cv_.notify_all();
      return;
    }
    ++answered_;
    cv_.notify_all();
  }
}

bool Liveness::store_answers(std::chrono::milliseconds within) {
  std::unique_lock<std::mutex> lock(mu_);
  if (store_failed_) return false;
  // Any answer from now on shows the store alive now (even one to a heartbeat sent before).
  const uint64_t want = answered_ + 1;
  poke_ = true;
  cv_.notify_all();
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (answered_ < want && !store_failed_) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
  }
  return answered_ >= want;
}

void Liveness::mark_failed() {
  try {
    store_->set(failed_key(rank_), "1");
  } catch (const std::exception&) {
  }
}

std::vector<int> Liveness::stalled(const std::vector<int>& candidates) {
  std::vector<int64_t> before;
  for (int r : candidates) before.push_back(store_->add(key(r), 0));
  std::this_thread::sleep_for(interval_ * 3);
  std::vector<int> out;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i] != rank_ && store_->add(key(candidates[i]), 0) == before[i] &&
        !store_->check({failed_key(candidates[i])}))
      out.push_back(candidates[i]);
  return out;
}

std::string Liveness::describe_loss(const std::vector<int>& candidates, int store_host) {
  const auto patience = std::max(interval_ * 3, std::chrono::milliseconds(1000));
  if (rank_ != store_host && !store_answers(patience)) {
    store_lost_ = true;
    last_lost_ = store_host;
    std::ostringstream s;
    s << "lost peer rank " << store_host << " (it hosts the store, which no longer answers";
    if (!store_failed_) s << " heartbeats: none for " << double(patience.count()) / 1000.0 << " s";
    s << "; dead or frozen)";
    return s.str();
  }
  std::vector<int> lost;
  mark_failed();
  try {
    lost = stalled(candidates);
  } catch (const std::exception&) {
    store_lost_ = true;
    last_lost_ = store_host;
    return "lost peer rank " + std::to_string(store_host) + " (it hosts the store, which no longer answers)";
  }
  if (lost.empty()) return "";
  last_lost_ = lost.front();
  std::ostringstream s;
  s << "lost peer rank" << (lost.size() > 1 ? "s " : " ");
  for (size_t i = 0; i < lost.size(); ++i) s << (i ? ", " : "") << lost[i];
  s << " (no heartbeat for " << double((interval_ * 3).count()) / 1000.0 << " s: dead or frozen)";
  return s.str();
}

}  // namespace distrun
