#include "distrun/host/paths/socket_mesh.hpp"

#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "distrun/backend/intent.hpp"
#include "distrun/backend/types.hpp"
#include "distrun/core/error.hpp"
#include "distrun/store/auth.hpp"

namespace distrun {

namespace {

constexpr uint64_t kMagic = 0x6473636bull;  // "dsck": every header's top half
constexpr size_t kHeaderBytes = 3 * sizeof(uint64_t);
constexpr int kMaxIov = 64;
// The most bytes read past what a read asks for (see the header): a small message's header and
// bytes, or a few such messages, in one call.
constexpr size_t kReadAhead = size_t(16) << 10;
// What a later operation with a peer says once a failure cut their connection mid-message.
constexpr const char* kCut =
    "is no longer connected: this rank cut the connection when an operation failed mid-message";
// While a peer's connection is awaited, another thread's wait may be the one that lets it in
// (ranks of one test in one process): look again this often.
constexpr auto kAwaitSlice = std::chrono::milliseconds(10);
// A wait in which a send of ours has moved nothing for this long reads every connection from
// then on (see the header): long enough that healthy schedules, whose receives are posted,
// never copy a message aside for it.
constexpr auto kStalledSend = std::chrono::milliseconds(20);
// The longest a mesh's teardown waits for its peers to take what it has written (see
// ~SocketMesh): a peer that reads nothing for this long loses the rest.
constexpr auto kLinger = std::chrono::seconds(2);
// What a teardown reads and drops of a connection at a time: what its peer has sent so far, not
// a stream it goes on sending.
constexpr size_t kDrainBytes = size_t(1) << 20;
// The longest text a peer's cut may carry (see SocketMesh::cut); a longer one is not distrun's.
constexpr size_t kCutTextMost = 4096;

// Bytes written to `fd` that its peer has not yet acknowledged.
int unacknowledged(int fd) {
  int queued = 0;
  return ::ioctl(fd, SIOCOUTQ, &queued) == 0 ? queued : 0;
}

// Reads and drops what `fd` holds, kDrainBytes at most (a peer may be streaming); false once
// it is at its end or failed.
bool drain(int fd) {
  static thread_local char sink[1 << 16];
  for (size_t took = 0; took < kDrainBytes;) {
    const ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n > 0) {
      took += size_t(n);
      continue;
    }
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
  }
  return true;
}

int ms_until(SocketMesh::Clock::time_point deadline) {
  const auto now = SocketMesh::Clock::now();
  if (deadline <= now) return 0;  // a look that waits for nothing (SocketPath's drain) polls once
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
  return int(std::clamp<int64_t>(left.count() + 1, 0, 1 << 30));
}

// Writes or reads exactly `bytes` on a nonblocking socket before `deadline`; false otherwise.
template <typename Io>
bool exactly(int fd, short events, size_t bytes, SocketMesh::Clock::time_point deadline, Io io) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = io(done);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    pollfd p{fd, events, 0};
    if (::poll(&p, 1, ms_until(deadline)) <= 0 && SocketMesh::Clock::now() >= deadline) return false;
  }
  return true;
}

void no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

SocketMesh::SocketMesh(std::shared_ptr<Store> store, int rank, int size, const sockaddr_storage& address,
                       std::vector<int> global_ranks, const std::string& secret)
    : store_(std::move(store)), rank_(rank), size_(size), global_ranks_(std::move(global_ranks)), conns_(size_t(size)),
      listener_(SocketListener::on(address)) {
  // Without a workers' secret the key's input is random and travels in the store, which is then
  // on loopback (one host) or in this process (tests).
  if (rank_ == 0) {
    store_->set("sock/group", auth::random_bytes(pair_auth::kGroupBytes));
    if (secret.empty()) store_->set("sock/key", auth::random_bytes(32));
  }
  group_ = store_->get("sock/group");
  if (group_.size() != pair_auth::kGroupBytes) throw BackendError("the group's id in the store is malformed");
  key_ = pair_auth::group_key(secret.empty() ? store_->get("sock/key") : secret, group_);
  listener_->join(group_, rank_, key_);
  store_->set("sock/addr/" + std::to_string(rank_),
              std::string(reinterpret_cast<const char*>(&listener_->address()), listener_->address_length()));
}

SocketMesh::~SocketMesh() {
  listener_->leave(group_, rank_);
  // A send is done once written, so what the kernel still holds is a message its peer has yet
  // to read: closing a socket with unread input (the acceptor's answer, a refusal) makes Linux
  // reset the connection and drop it. So each connection with bytes in flight is shut for
  // writing and read, its input dropped, until its peer has acknowledged them (kLinger at most,
  // for all together), and every connection's input is drained before it closes.
  std::vector<pollfd> lingering;  // their fds, read while they linger
  for (Conn& c : conns_)
    if (c.fd >= 0 && unacknowledged(c.fd) > 0 && ::shutdown(c.fd, SHUT_WR) == 0) lingering.push_back({c.fd, POLLIN, 0});
  const auto until = Clock::now() + kLinger;
  while (!lingering.empty() && Clock::now() < until) {
    // A connection at its end or failed will acknowledge nothing more (its count stays put).
    lingering.erase(std::remove_if(lingering.begin(), lingering.end(),
                                   [&](const pollfd& p) { return !drain(p.fd) || unacknowledged(p.fd) == 0; }),
                    lingering.end());
    // An acknowledgement wakes no poll: look again every few milliseconds, sooner when input comes.
    if (!lingering.empty()) ::poll(lingering.data(), lingering.size(), std::min(ms_until(until), 5));
  }
  for (Conn& c : conns_) {
    if (c.fd >= 0) drain(c.fd);
    close_conn(c);
  }
}

int SocketMesh::global(int r) const { return global_rank_of(global_ranks_, r); }

void SocketMesh::close_conn(Conn& c) {
  if (c.fd >= 0) ::close(c.fd);
  c.fd = -1;
  c.ahead_at = c.ahead_end = 0;
  // A message cut off mid-way is never completed: what of it was stashed goes, and the receive
  // it was read into (`into`) stays, for the wait that needs it to fail.
  if (c.stashing) c.stash.remove_if([&](const Stashed& m) { return &m == c.stashing; });
  c.stashing = nullptr;
  c.dropping = 0;
  c.header_got = 0;
}

ssize_t SocketMesh::fill(Conn& c, iovec* iov, int k, bool whole) {
  if (c.ahead_at < c.ahead_end) {
    size_t got = 0;
    for (int i = 0; i < k && c.ahead_at < c.ahead_end; ++i) {
      const size_t n = std::min(iov[i].iov_len, c.ahead_end - c.ahead_at);
      std::memcpy(iov[i].iov_base, c.ahead.get() + c.ahead_at, n);
      c.ahead_at += n;
      got += n;
    }
    return ssize_t(got);
  }
  if (!whole) return ::readv(c.fd, iov, k);
  if (!c.ahead) c.ahead = std::make_unique<char[]>(kReadAhead);
  size_t want = 0;
  for (int i = 0; i < k; ++i) want += iov[i].iov_len;
  iov[k] = iovec{c.ahead.get(), kReadAhead};
  const ssize_t n = ::readv(c.fd, iov, k + 1);
  if (n <= 0) return n;
  c.ahead_at = 0;
  c.ahead_end = size_t(n) > want ? size_t(n) - want : 0;
  return ssize_t(std::min(size_t(n), want));
}

void SocketMesh::fail_peer(int peer, const std::string& what, bool cut) const {
  const std::string text = "rank " + std::to_string(global(peer)) + " " + what;
  if (cut) throw CutError(global(peer), conns_[size_t(peer)].reason, text);
  throw BackendError(text);
}

void SocketMesh::connect_to(int peer, Clock::time_point deadline) {
  const std::string a = store_->get("sock/addr/" + std::to_string(peer));
  sockaddr_storage to{};
  std::memcpy(&to, a.data(), std::min(a.size(), sizeof to));
  const int fd = ::socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw BackendError(std::string("cannot open a socket: ") + std::strerror(errno));
  int err = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), socklen_t(a.size())) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof err;
      err =
          ::poll(&p, 1, ms_until(deadline)) == 1 ? (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len), err) : ETIMEDOUT;
    }
  }
  const pair_auth::Hello hello = pair_auth::hello(key_, group_, uint32_t(rank_), uint32_t(peer));
  if (err == 0 && !exactly(fd, POLLOUT, sizeof hello, deadline, [&](size_t at) {
        return ::send(fd, reinterpret_cast<const char*>(&hello) + at, sizeof hello - at, MSG_NOSIGNAL);
      }))
    err = errno ? errno : ETIMEDOUT;
  if (err != 0) {
    ::close(fd);
    if (err == ETIMEDOUT)
      throw TimeoutError("timed out connecting to rank " + std::to_string(global(peer)), {global(peer)});
    fail_peer(peer, std::string("cannot be reached: ") + std::strerror(err));
  }
  no_delay(fd);
  Conn& c = conns_[size_t(peer)];
  c.fd = fd;
  c.opened = true;
  c.expect = pair_auth::proof(key_, pair_auth::Role::Accept, group_, uint32_t(rank_), uint32_t(peer),
                              std::string_view(hello.nonce, pair_auth::kNonceBytes));
  ++opened_;
}

void SocketMesh::take_accepted() {
  // Nothing let in since the last look: no lock, no lookup (every wait looks each time round).
  const uint64_t let_in = listener_->let_in();
  if (let_in == taken_at_) return;
  taken_at_ = let_in;
  for (auto [peer, fd] : listener_->take(group_, rank_)) {
    Conn& c = conns_[size_t(peer)];
    if (c.opened) {
      ::close(fd);
      continue;
    }
    c.fd = fd;
    c.opened = true;
    ++opened_;
    if (!c.sends.empty()) write_some(peer);
  }
}

bool SocketMesh::read_answer(int peer) {
  Conn& c = conns_[size_t(peer)];
  while (c.answer_got < sizeof c.answer) {
    const ssize_t n = ::recv(c.fd, c.answer + c.answer_got, sizeof c.answer - c.answer_got, 0);
    if (n > 0) {
      c.answer_got += size_t(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    fail_peer(peer, "refused this rank's connection (is DISTRUN_STORE_SECRET the same on every rank?)");
  }
  if (!auth::equal_in_constant_time(std::string_view(c.answer, sizeof c.answer), c.expect))
    fail_peer(peer, "answered at its address without this group's key: not a member");
  c.expect.clear();
  return true;
}

void SocketMesh::post(int peer, const std::shared_ptr<Send>& op, Clock::time_point deadline, bool more) {
  Conn& c = conns_[size_t(peer)];
  if (c.gone) fail_peer(peer, "closed its connection");
  if (!c.lost.empty()) fail_peer(peer, c.lost, c.cut());
  if (c.fd < 0 && peer > rank_ && !c.opened) connect_to(peer, deadline);
  op->header[0] = kMagic << 32 | uint64_t(op->key.kind);
  op->header[1] = op->key.key;
  op->total = 0;
  for (auto& part : op->parts) op->total += part.second;
  op->header[2] = op->total;
  op->total += kHeaderBytes;
  op->sent = 0;
  op->done = false;
  c.sends.push_back(op);
  // A socket found full waits for POLLOUT, unless this is all there is to send (the queue that
  // filled it may have been abandoned since).
  if (!more && (!c.full || c.sends.size() == 1) && c.fd >= 0) write_some(peer);
  raise_failed(peer, *op);
}

void SocketMesh::drop_sends(Conn& c, const std::string& why) {
  c.lost = why;
  for (const auto& op : c.sends) {
    op->failed = why;
    op->cut = c.cut();
    op->done = true;
  }
  c.sends.clear();
  c.full = false;
}

void SocketMesh::raise_failed(int peer, const Send& op) const {
  if (!op.failed.empty()) fail_peer(peer, op.failed, op.cut);
}

void SocketMesh::deliver(const Stashed& m, Recv& r) {
  if (r.at_most && m.bytes.size() <= r.bytes) r.bytes = m.bytes.size();
  if (m.bytes.size() != r.bytes) {
    r.differs = true;
    r.stated = m.bytes.size();
  } else {
    size_t at = 0;
    for (auto& [into, bytes] : r.parts) {
      const size_t n = std::min(bytes, r.bytes - at);
      if (n) std::memcpy(into, m.bytes.data() + at, n);
      at += n;
    }
    r.got = r.bytes;
  }
  r.done = true;
}

void SocketMesh::post(int peer, const std::shared_ptr<Recv>& op, Clock::time_point deadline) {
  Conn& c = conns_[size_t(peer)];
  if (c.fd < 0 && peer > rank_ && !c.opened) connect_to(peer, deadline);
  op->got = 0;
  op->done = op->differs = false;
  op->bytes = 0;
  for (auto& part : op->parts) op->bytes += part.second;
  for (auto it = c.stash.begin(); it != c.stash.end(); ++it)
    if (it->key == op->key && &*it != c.stashing) {
      deliver(*it, *op);
      c.stash.erase(it);
      return;
    }
  if (c.gone) fail_peer(peer, "closed its connection");
  if (!c.lost.empty() && c.fd < 0) fail_peer(peer, c.lost, c.cut());
  c.recvs.push_back(op);
}

void SocketMesh::abandon(int peer, const std::shared_ptr<Send>& op) {
  if (!op->own.empty()) return;  // detached: it needs no buffer of its caller's
  Conn& c = conns_[size_t(peer)];
  auto it = std::find(c.sends.begin(), c.sends.end(), op);
  if (it == c.sends.end()) return;
  if (op->sent > 0 && !op->done) {
    close_conn(c);
    c.lost = kCut;
  }
  c.sends.erase(it);
}

void SocketMesh::abandon(int peer, const std::shared_ptr<Recv>& op) {
  Conn& c = conns_[size_t(peer)];
  if (c.into == op) {
    c.dropping = op->differs ? c.dropping : op->bytes - op->got;
    c.into = nullptr;
  }
  c.recvs.erase(std::remove(c.recvs.begin(), c.recvs.end(), op), c.recvs.end());
}

void SocketMesh::cut(int peer, const std::string& why) {
  Conn& c = conns_[size_t(peer)];
  // The peer learns why without a wait here: one write that the socket takes or not, behind
  // the messages already written whole (never inside a half-written one), then the end of
  // this side's stream. progress() fails the receives still posted on the connection.
  if (c.fd >= 0 && (c.sends.empty() || c.sends.front()->sent == 0)) {
    const std::string text = "rank " + std::to_string(global(peer)) + " " + why;
    uint64_t header[3] = {kMagic << 32 | uint64_t(Kind::Cut), 0, text.size()};
    iovec iov[2] = {{header, kHeaderBytes}, {const_cast<char*>(text.data()), text.size()}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    if (::sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) == ssize_t(kHeaderBytes + text.size()))
      ::shutdown(c.fd, SHUT_WR);
  }
  c.reason = "rank " + std::to_string(global(peer)) + " " + why;
  // Closing with unread input resets the connection, which can drop that last message before
  // the peer reads it: what has come is read and dropped first (bounded; later input still
  // resets it).
  if (c.fd >= 0) drain(c.fd);
  drop_sends(c, why);
  close_conn(c);
}

void SocketMesh::give_notice(int peer, const std::string& why) {
  Conn& c = conns_[size_t(peer)];
  if (c.fd < 0 || c.gone || !c.lost.empty()) return;
  auto op = std::make_shared<Send>();
  op->key = {Kind::Notice, 0};
  op->own.assign(why.begin(), why.begin() + ptrdiff_t(std::min(why.size(), kCutTextMost)));
  op->parts = {{op->own.data(), op->own.size()}};  // its own bytes: written on later progress if need be
  try {
    post(peer, op, Clock::now());
  } catch (const Error&) {  // the peer lost: later operations with it say so
  }
}

std::string SocketMesh::take_text(Conn& c) {
  std::string text = printable(std::string(c.stash.back().bytes.begin(), c.stash.back().bytes.end()));
  c.stash.pop_back();
  return text;
}

void SocketMesh::hung_up(int peer) {
  Conn& c = conns_[size_t(peer)];
  c.reason = take_text(c);
  // As at its end: later operations with it fail, and so does a wait that needs it (progress).
  drop_sends(c, "hung up on this rank: " + c.reason);
  close_conn(c);
}

void SocketMesh::lose(int peer, const std::string& what) {
  Conn& c = conns_[size_t(peer)];
  // A cut already known (its text found behind a failed write) stays what the peer says.
  drop_sends(c, c.reason.empty() ? what : c.lost);
  close_conn(c);
}

std::string SocketMesh::pending_cut(int peer) const {
  const Conn& c = conns_[size_t(peer)];
  if (c.fd < 0 || !c.expect.empty() || (c.header_got > 0 && c.header_got < kHeaderBytes)) return "";
  // What is still to come of the message in hand, then whole messages up to the cut's.
  uint64_t skip = 0;
  if (c.header_got == kHeaderBytes)
    skip = c.into && !c.into->differs ? c.into->bytes - c.into->got
           : c.stashing               ? c.stashing->bytes.size() - c.dropping
                                      : c.dropping;
  std::vector<char> unread(c.ahead_end - c.ahead_at + kDrainBytes);
  if (c.ahead_at < c.ahead_end) std::memcpy(unread.data(), c.ahead.get() + c.ahead_at, c.ahead_end - c.ahead_at);
  size_t have = c.ahead_end - c.ahead_at;
  ssize_t n;
  do {
    n = ::recv(c.fd, unread.data() + have, kDrainBytes, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n > 0) have += size_t(n);
  for (uint64_t at = skip; at <= have && have - at >= kHeaderBytes;) {
    uint64_t header[3];
    std::memcpy(header, unread.data() + at, kHeaderBytes);
    at += kHeaderBytes;
    if (header[0] >> 32 != kMagic || header[2] > have - at) return "";
    if (Kind(uint32_t(header[0])) == Kind::Cut)
      return header[2] > kCutTextMost ? "" : printable(std::string(unread.data() + at, header[2]));
    at += header[2];
  }
  return "";
}

void SocketMesh::detach(const std::shared_ptr<Send>& op) {
  if (op->done || !op->own.empty()) return;
  for (auto& [p, bytes] : op->parts) op->own.insert(op->own.end(), p, p + bytes);
  op->parts = {{op->own.data(), op->own.size()}};
}

void SocketMesh::discard_below(Kind kind, uint64_t key) {
  uint64_t& floor = floor_of(kind);
  floor = std::max(floor, key);
  for (Conn& c : conns_)
    c.stash.remove_if([&](const Stashed& m) { return m.key.kind == kind && m.key.key < floor && &m != c.stashing; });
}

size_t SocketMesh::stashed() const {
  size_t n = 0;
  for (const Conn& c : conns_) n += c.stash.size();
  return n;
}

bool SocketMesh::write_some(int peer) {
  Conn& c = conns_[size_t(peer)];
  while (!c.sends.empty()) {
    // Every queued message, as far as the iovecs go, in one write.
    iovec iov[kMaxIov];
    int n = 0;
    for (const auto& op : c.sends) {
      if (n == kMaxIov) break;
      size_t skip = op->sent;
      auto add = [&](const char* p, size_t bytes) {
        if (n == kMaxIov) return;
        if (skip >= bytes) {
          skip -= bytes;
          return;
        }
        iov[n++] = iovec{const_cast<char*>(p + skip), bytes - skip};
        skip = 0;
      };
      add(reinterpret_cast<const char*>(op->header), kHeaderBytes);
      for (auto& [p, bytes] : op->parts) add(p, bytes);
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = size_t(n);
    ssize_t w = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return !(c.full = true);
      // Its peer is gone: what is queued for it never goes, and stays queued no longer (a
      // waiter on other peers would wait on it). Each such send is done, failed, so that the
      // wait it belongs to raises it at once and a wait on other peers goes on. What the peer
      // sent before leaving may still be in the socket: the connection stays open for the
      // receives that take it.
      std::string why = std::string("lost its connection: ") + std::strerror(errno);
      // Its peer may have hung up on this rank, the reset coming before this rank read why.
      if (std::string cut = pending_cut(peer); !cut.empty()) {
        c.reason = std::move(cut);
        why = "hung up on this rank: " + c.reason;
      }
      drop_sends(c, why);
      return false;
    }
    c.full = false;
    while (w > 0) {
      Send& s = *c.sends.front();
      const size_t took = std::min(size_t(w), s.total - s.sent);
      s.sent += took;
      w -= ssize_t(took);
      if (s.sent < s.total) break;
      s.done = true;
      c.sends.pop_front();
    }
  }
  return true;
}

void SocketMesh::start_message(int peer) {
  Conn& c = conns_[size_t(peer)];
  const Key key{Kind(uint32_t(c.header[0])), c.header[1]};
  const uint64_t bytes = c.header[2];
  if (c.header[0] >> 32 != kMagic || ((key.kind == Kind::Cut || key.kind == Kind::Notice) && bytes > kCutTextMost))
    fail_peer(peer, "sent a message that is not one of distrun's");
  auto it = std::find_if(c.recvs.begin(), c.recvs.end(), [&](const auto& r) { return r->key == key; });
  if (it != c.recvs.end()) {
    c.into = *it;
    c.recvs.erase(it);
    if (c.into->at_most && bytes <= c.into->bytes) c.into->bytes = bytes;
    if (bytes != c.into->bytes) {
      // Read and dropped: the receiver's buffer holds what it states, never what the sender does.
      c.into->differs = true;
      c.into->stated = bytes;
      c.dropping = bytes;
    }
    return;
  }
  if (key.key < floor_of(key.kind)) {
    c.into = nullptr;
    c.stashing = nullptr;
    c.dropping = bytes;
    return;
  }
  c.stash.push_back(Stashed{key, std::vector<char>(bytes)});
  c.stashing = &c.stash.back();
  c.into = nullptr;
  c.dropping = 0;
}

bool SocketMesh::read_some(int peer, bool posted_only) {
  Conn& c = conns_[size_t(peer)];
  if (!c.expect.empty() && !read_answer(peer)) return false;
  bool read = false;
  // Between messages, read on only while this connection has something to wait for.
  auto waits = [&] { return c.receiving() || (!posted_only && !c.sends.empty()); };
  for (;;) {
    ssize_t n;
    iovec iov[kMaxIov + 1];  // and one for the read-ahead
    if (c.header_got < kHeaderBytes) {
      iov[0] = iovec{reinterpret_cast<char*>(c.header) + c.header_got, kHeaderBytes - c.header_got};
      n = fill(c, iov, 1, true);
    } else if (c.into && !c.into->differs) {
      int k = 0;
      size_t skip = c.into->got, left = c.into->bytes - c.into->got;
      for (auto& [p, bytes] : c.into->parts) {
        if (k == kMaxIov || left == 0) break;
        if (skip >= bytes) {
          skip -= bytes;
          continue;
        }
        const size_t len = std::min(bytes - skip, left);
        iov[k++] = iovec{p + skip, len};
        left -= len;
        skip = 0;
      }
      n = k ? fill(c, iov, k, left == 0) : 0;
      if (k == 0) n = -1, errno = EAGAIN;  // nothing left (a 0-byte message completes below)
    } else if (c.stashing) {
      iov[0] = iovec{c.stashing->bytes.data() + c.dropping, c.stashing->bytes.size() - c.dropping};
      n = fill(c, iov, 1, true);
    } else {
      static thread_local char sink[1 << 16];
      iov[0] = iovec{sink, std::min<uint64_t>(sizeof sink, c.dropping)};
      n = fill(c, iov, 1, c.dropping <= sizeof sink);
    }
    // Completion of the message in hand, including one of no bytes.
    auto complete = [&] {
      if (c.header_got < kHeaderBytes) return;
      if (c.into && !c.into->differs && c.into->got < c.into->bytes) return;
      if (c.stashing && c.dropping < c.stashing->bytes.size()) return;
      if (!c.stashing && (!c.into || c.into->differs) && c.dropping > 0) return;
      if (c.into) c.into->done = true;
      const bool cut = c.stashing && c.stashing->key.kind == Kind::Cut;
      // A peer's notice is the connection's, kept for a timeout to raise (give_notice).
      const bool notice = c.stashing && c.stashing->key.kind == Kind::Notice;
      if (c.stashing && !cut && !notice) {
        // A receive posted while this message was arriving takes it now.
        Stashed& m = *c.stashing;
        c.stashing = nullptr;
        auto it = std::find_if(c.recvs.begin(), c.recvs.end(), [&](const auto& r) { return r->key == m.key; });
        if (it != c.recvs.end()) {
          deliver(m, **it);
          c.recvs.erase(it);
          c.stash.pop_back();
        } else if (m.key.key < floor_of(m.key.kind)) {
          c.stash.pop_back();
        }
      }
      c.stashing = nullptr;
      c.into = nullptr;
      c.dropping = 0;
      c.header_got = 0;
      if (notice) c.notice = take_text(c);
      if (cut) hung_up(peer);
    };
    if (n > 0) {
      read = true;
      if (c.header_got < kHeaderBytes) {
        c.header_got += size_t(n);
        if (c.header_got == kHeaderBytes) start_message(peer);
      } else if (c.into && !c.into->differs) {
        c.into->got += size_t(n);
      } else {
        // Stash and drop positions share `dropping`: bytes of the message read so far.
        c.dropping = c.stashing ? c.dropping + size_t(n) : c.dropping - size_t(n);
      }
      complete();
      if (c.fd < 0 || (c.header_got == 0 && !waits())) return read;
      continue;
    }
    if (n == 0) {
      // Between messages, with no receive of ours pending, a peer that is done may leave (our
      // sends to it fail, raised by their own waits).
      if (c.header_got == 0 && !c.receiving()) {
        if (!c.sends.empty()) drop_sends(c, "closed its connection");
        close_conn(c);
        c.gone = true;
        return read;
      }
      // A receive of ours pending, or a message half read: the wait that needs it raises.
      lose(peer, "closed its connection");
      return read;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      const size_t before = c.header_got;
      complete();
      // A message of no bytes ended.
      if (before == kHeaderBytes && c.header_got == 0 && c.fd >= 0 && waits()) continue;
      return read;
    }
    const std::string lost = std::string("lost its connection: ") + std::strerror(errno);
    // As at its end: a wait that reads it for another's sake goes on, and later operations
    // with that peer fail, as does a wait that needs a receive posted on it.
    lose(peer, lost);
    return read;
  }
}

bool SocketMesh::passive_next(int peer) {
  Conn& c = conns_[size_t(peer)];
  if (!c.expect.empty() && !read_answer(peer)) return false;
  uint64_t header[3];
  const size_t ahead = c.ahead_end - c.ahead_at;
  if (ahead >= kHeaderBytes) {
    std::memcpy(header, c.ahead.get() + c.ahead_at, kHeaderBytes);
  } else if (ahead > 0) {
    return false;  // a header split between the read-ahead and the socket: left for a wait that reads
  } else {
    ssize_t n;
    do {
      n = ::recv(c.fd, header, kHeaderBytes, MSG_PEEK | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    // Its end, an error or a stranger's bytes: read_some says which.
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
    if (n < ssize_t(kHeaderBytes)) return false;
  }
  const Key key{Kind(uint32_t(header[0])), header[1]};
  // A peer's cut is its connection's end, said: read_some raises it as one, and keeps a notice.
  // A message no receive will take (below its kind's floor) is read and dropped, not left in
  // the way.
  return header[0] >> 32 != kMagic || key.kind == Kind::Cut || key.kind == Kind::Notice ||
         key.key < floor_of(key.kind) ||
         std::any_of(c.recvs.begin(), c.recvs.end(), [&](const auto& r) { return r->passive && r->key == key; });
}

bool SocketMesh::progress(const std::function<bool()>& done, Clock::time_point deadline,
                          const std::function<void()>& on_read, bool posted_only,
                          const std::function<std::vector<int>()>& late, bool or_return, Clock::time_point* moved_at) {
  // The poll's lists, kept across waits so that a wait allocates nothing.
  std::vector<pollfd>& fds = wait_.fds;
  std::vector<int>& peer_of = wait_.peer_of;
  std::vector<bool>& for_passive = wait_.for_passive;
  std::vector<int>& not_passive = wait_.not_passive;
  not_passive.clear();
  // Whether this wait needs group rank r (`late` names it; without `late`, every peer does).
  auto needs = [&](int r) {
    if (!late) return true;
    const std::vector<int> needed = late();
    return std::find(needed.begin(), needed.end(), r) != needed.end();
  };
  // When one of this group's sockets last had something for us.
  auto moved = moved_at ? *moved_at : Clock::now();
  bool stalled = false;  // a send of ours waited kStalledSend with nothing moving
  for (;;) {
    take_accepted();
    if (done()) return true;
    fds.clear();
    peer_of.clear();
    for_passive.clear();
    bool awaiting = false;  // a posted operation on a connection a peer has yet to make
    bool sending = false;   // a send of ours waits for its peer to read
    bool ahead = false;     // a connection to read holds bytes read ahead
    for (const Conn& c : conns_) sending = sending || !c.sends.empty();
    stalled = stalled || (sending && Clock::now() - moved >= kStalledSend);
    for (int r = 0; r < size_; ++r) {
      Conn& c = conns_[size_t(r)];
      if (c.fd < 0) {
        // One closed for good (cut, by this rank or its peer, or ended under a receive of ours)
        // is awaited no more: a receive still posted on it fails a wait that needs that peer at
        // once, saying why; a wait on other peers goes on without it.
        if (!c.lost.empty() && (c.receiving() || (c.into && !c.into->passive)) && needs(r))
          fail_peer(r, c.lost, c.cut());
        awaiting = awaiting || (c.lost.empty() && (!c.sends.empty() || c.receiving()));
        continue;
      }
      // Read where a receive waits, a message is half read, or our sends wait on the peer
      // (which may be sending to us; not with `posted_only`); once a send of ours stalls, every
      // connection: its peer may be blocked sending to us, as we are to ours (blocking sends
      // posted around a cycle before their receives). Otherwise what arrives stays in the
      // socket until its receive is posted, rather than being copied aside; but outside
      // `posted_only`, a connection with a passive receive on it is watched, and read when
      // that receive takes its next message.
      const bool reading = stalled || c.receiving() || c.header_got > 0 || (!posted_only && !c.sends.empty());
      const bool passive = !reading && !posted_only && c.standing() &&
                           std::find(not_passive.begin(), not_passive.end(), r) == not_passive.end();
      if (!reading && !passive && c.sends.empty()) continue;
      fds.push_back(pollfd{c.fd, short((reading || passive ? POLLIN : 0) | (c.sends.empty() ? 0 : POLLOUT)), 0});
      peer_of.push_back(r);
      for_passive.push_back(passive);
      ahead = ahead || ((reading || passive) && c.ahead_at < c.ahead_end);
    }
    // Bytes read ahead are read before any look at the sockets: a small message that came
    // behind the one in hand (the hub's result behind its answer) costs no system call.
    if (ahead) {
      bool read = false;
      for (size_t i = 0; i < fds.size(); ++i) {
        const int r = peer_of[i];
        const Conn& c = conns_[size_t(r)];
        if (!(fds[i].events & POLLIN) || c.ahead_at >= c.ahead_end) continue;
        if (for_passive[i] && !passive_next(r))
          not_passive.push_back(r);
        else
          read = read_some(r, posted_only) || read;
      }
      if (read && on_read) on_read();
      continue;
    }
    // Every wait serves the listener, so that a peer's first message never waits for this
    // rank to need it.
    const size_t ours = fds.size();
    listener_->watch(fds);
    auto wake = deadline;
    if (awaiting) wake = std::min(wake, Clock::now() + kAwaitSlice);
    if (sending && !stalled) wake = std::min(wake, moved + kStalledSend);
    const int ready = ::poll(fds.data(), fds.size(), ms_until(wake));
    ++polls_;
    listener_->serve(fds.data() + ours, ready > 0 ? fds.size() - ours : 0);
    if (std::any_of(fds.begin(), fds.begin() + ptrdiff_t(ours), [](const pollfd& p) { return p.revents != 0; })) {
      moved = Clock::now();
      if (moved_at) *moved_at = moved;
    }
    auto time_out = [&]() -> bool {
      std::vector<int> waiting;  // group ranks, then global
      if (late)
        waiting = late();
      else
        for (int r = 0; r < size_; ++r)
          if (const Conn& c = conns_[size_t(r)]; !c.sends.empty() || c.receiving() || (c.into && !c.into->passive))
            waiting.push_back(r);
      // A peer that said it reads nothing more of our collectives' rows is why such a row never
      // went (a point-to-point send to it may only wait for a slow receiver: that times out).
      for (int r : waiting)
        if (const Conn& c = conns_[size_t(r)];
            !c.notice.empty() && !c.sends.empty() && c.sends.front()->key.kind == Kind::Intent)
          throw CollectiveMismatchError("rank " + std::to_string(global(r)) +
                                        " reads nothing more of what this rank sends (" + c.notice + ")");
      if (or_return) return false;
      for (int& r : waiting) r = global(r);
      throw TimeoutError("timed out waiting for rank(s) " + (waiting.empty() ? std::string("?") : rank_list(waiting)),
                         waiting);
    };
    if (ready <= 0) {
      if ((ready < 0 && errno == EINTR) || Clock::now() < deadline) continue;
      if (!time_out()) return false;
    }
    bool read = false;
    for (size_t i = 0; i < ours; ++i) {
      const int r = peer_of[i];
      if (fds[i].revents & POLLOUT) write_some(r);
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (for_passive[i] && !passive_next(r))
        not_passive.push_back(r);
      else
        read = read_some(r, posted_only) || read;
    }
    if (read && on_read) on_read();
    // A peer that never stops sending must not hold this wait past its deadline either.
    if (Clock::now() >= deadline && !done() && !time_out()) return false;
  }
}

size_t SocketMesh::unread(int peer) const {
  const Conn& c = conns_[size_t(peer)];
  int queued = 0;
  if (c.fd >= 0 && ::ioctl(c.fd, FIONREAD, &queued) < 0) queued = 0;
  return size_t(queued) + (c.ahead_end - c.ahead_at);
}

}  // namespace distrun
