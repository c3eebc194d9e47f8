#include "distrun/host/paths/socket_listener.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "distrun/core/error.hpp"
#include "distrun/store/auth.hpp"

namespace distrun {

namespace pair_auth {

std::string group_key(std::string_view secret, std::string_view group) {
  return auth::hkdf(secret, group, "distrun socket pairs v1", 32);
}

std::string proof(std::string_view key, Role role, std::string_view group, uint32_t from, uint32_t to,
                  std::string_view nonce) {
  std::string msg = role == Role::Connect ? "connect" : "accept";
  msg.push_back('\0');
  msg.append(group);
  msg.append(reinterpret_cast<const char*>(&from), sizeof from);
  msg.append(reinterpret_cast<const char*>(&to), sizeof to);
  msg.append(nonce);
  return auth::hmac(key, msg);
}

Hello hello(std::string_view key, std::string_view group, uint32_t from, uint32_t to) {
  Hello h{kMagic, {}, from, to, {}, {}};
  std::memcpy(h.group, group.data(), std::min(group.size(), kGroupBytes));
  const std::string nonce = auth::random_bytes(kNonceBytes);
  std::memcpy(h.nonce, nonce.data(), kNonceBytes);
  const std::string p = proof(key, Role::Connect, std::string_view(h.group, kGroupBytes), from, to, nonce);
  std::memcpy(h.proof, p.data(), kProofBytes);
  return h;
}

}  // namespace pair_auth

namespace {

socklen_t length_of(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// The listeners of this process, by the address they are bound to (port zero).
std::mutex listeners_mu;
std::map<std::string, std::weak_ptr<SocketListener>> listeners;

}  // namespace

std::shared_ptr<SocketListener> SocketListener::on(const sockaddr_storage& address) {
  sockaddr_storage at = address;
  if (at.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6&>(at).sin6_port = 0;
  else
    reinterpret_cast<sockaddr_in&>(at).sin_port = 0;
  const std::string where(reinterpret_cast<const char*>(&at), length_of(at));
  std::lock_guard lock(listeners_mu);
  if (auto shared = listeners[where].lock()) return shared;
  std::shared_ptr<SocketListener> made(new SocketListener(at));
  listeners[where] = made;
  return made;
}

SocketListener::SocketListener(const sockaddr_storage& address) : address_(address) {
  fd_ = ::socket(address_.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  socklen_t len = length_of(address_);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address_), len) != 0 || ::listen(fd_, SOMAXCONN) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address_), &len) != 0) {
    const int err = errno;
    if (fd_ >= 0) ::close(fd_);
    throw BackendError(std::string("cannot listen for the group's connections: ") + std::strerror(err));
  }
}

SocketListener::~SocketListener() {
  for (const Pending& p : pending_) ::close(p.fd);
  for (auto& [id, m] : members_)
    for (auto& [peer, fd] : m.ready) ::close(fd);
  ::close(fd_);
}

socklen_t SocketListener::address_length() const { return length_of(address_); }

void SocketListener::join(const std::string& group, int rank, const std::string& key) {
  std::lock_guard lock(mu_);
  members_[{group, rank}] = Member{key, {}, {}};
}

void SocketListener::leave(const std::string& group, int rank) {
  std::lock_guard lock(mu_);
  auto it = members_.find({group, rank});
  if (it == members_.end()) return;
  for (auto& [peer, fd] : it->second.ready) ::close(fd);
  members_.erase(it);
}

void SocketListener::watch(std::vector<pollfd>& fds) {
  std::lock_guard lock(mu_);
  fds.push_back(pollfd{fd_, POLLIN, 0});
  for (const Pending& p : pending_) fds.push_back(pollfd{p.fd, POLLIN, 0});
}

void SocketListener::accept_all() {
  for (;;) {
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    Pending p{fd, Clock::now() + kHelloBound, {}, 0};
    // A hello already in the socket is read at once, and only a connection still silent takes
    // a place among the pending, so a burst of members connecting does not crowd itself out.
    if (read_hello(p)) continue;
    if (pending_.size() >= kMostPending + members_still_to_connect()) {
      ::close(pending_.front().fd);
      pending_.erase(pending_.begin());
    }
    pending_.push_back(p);
  }
}

size_t SocketListener::members_still_to_connect() const {
  // Each member of rank r is connected to once by each of its r lower ranks.
  size_t n = 0;
  for (const auto& [id, m] : members_) n += size_t(id.second) - std::min(m.seen.size(), size_t(id.second));
  return n;
}

bool SocketListener::read_hello(Pending& p) {
  using namespace pair_auth;
  const ssize_t n = ::recv(p.fd, reinterpret_cast<char*>(&p.hello) + p.got, sizeof p.hello - p.got, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n <= 0) return ::close(p.fd), true;
  p.got += size_t(n);
  if (p.got < sizeof p.hello) return false;
  const Hello& h = p.hello;
  const std::string_view group(h.group, kGroupBytes), nonce(h.nonce, kNonceBytes);
  auto it = members_.find({std::string(group), int(h.to)});
  // Only a lower rank of a group registered here, once, with the group's key.
  if (h.magic != kMagic || h.from >= h.to || it == members_.end() || it->second.seen.count(h.from) ||
      !auth::equal_in_constant_time(std::string_view(h.proof, kProofBytes),
                                    proof(it->second.key, Role::Connect, group, h.from, h.to, nonce)))
    return ::close(p.fd), true;
  // The answer fits any fresh socket's buffer: a short write means the connector is gone.
  const std::string answer = proof(it->second.key, Role::Accept, group, h.from, h.to, nonce);
  if (::send(p.fd, answer.data(), answer.size(), MSG_NOSIGNAL) != ssize_t(answer.size())) return ::close(p.fd), true;
  const int one = 1;
  setsockopt(p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  it->second.seen.insert(h.from);
  it->second.ready.emplace_back(int(h.from), p.fd);
  let_in_.fetch_add(1, std::memory_order_release);
  return true;
}

void SocketListener::serve(const pollfd* fds, size_t n) {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    if (!fds[i].revents) continue;
    if (fds[i].fd == fd_) {
      accept_all();
      continue;
    }
    auto it = std::find_if(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.fd == fds[i].fd; });
    if (it != pending_.end() && read_hello(*it)) pending_.erase(it);
  }
  // Silent ones go at their bound.
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const Pending& p) { return p.until <= now && (::close(p.fd), true); }),
                 pending_.end());
}

std::vector<std::pair<int, int>> SocketListener::take(const std::string& group, int rank) {
  std::lock_guard lock(mu_);
  auto it = members_.find({group, rank});
  if (it == members_.end()) return {};
  return std::exchange(it->second.ready, {});
}

}  // namespace distrun
