// The TCPStore server: one asio io_context on one thread, every connection asynchronous, so a
// client that stalls mid-frame or never authenticates holds only its own socket. The protocol
// itself (what a connection may do when) is ServerSession; this file is the sockets around it:
// accepting (close-on-exec, backing off when descriptors run out), the strangers' own pool and
// deadline, and log lines about strangers kept to a budget.
#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <asio.hpp>
#include <cerrno>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "distrun/core/error.hpp"
#include "distrun/core/log.hpp"
#include "distrun/store/listen_socket.hpp"
#include "distrun/store/server_session.hpp"
#include "distrun/store/tcp_store.hpp"

namespace distrun {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// A flood of strangers must not write megabytes of log: a burst of lines, then one line a
// minute saying how many were left out; a new burst only after a quiet minute.
class LogBudget {
 public:
  static constexpr int kBurst = 10;
  static constexpr auto kWindow = std::chrono::seconds(60);

  template <typename... Args>
  void warn(spdlog::format_string_t<Args...> fmt, Args&&... args) {
    roll();
    if (used_ < kBurst) {
      ++used_;
      log().warn(fmt, std::forward<Args>(args)...);
    } else {
      ++suppressed_;
    }
  }
  // Called on every event and by the server's periodic tick, so the summary is not lost when
  // the flood stops.
  void roll() {
    if (Clock::now() - window_start_ >= kWindow) flush();
  }
  // Says how many lines were left out since the window began (also when the server stops, so
  // a flood that ends with the job is still counted), and starts a new window.
  void flush() {
    auto now = Clock::now();
    if (suppressed_ > 0)
      log().warn("distrun store: {} more lines about unauthenticated connections left out in the last {} s",
                 suppressed_, std::chrono::duration_cast<std::chrono::seconds>(now - window_start_).count());
    else
      used_ = 0;  // a quiet window: the next flood gets its burst again
    window_start_ = now;
    suppressed_ = 0;
  }

 private:
  Clock::time_point window_start_ = Clock::now();
  int used_ = 0;
  size_t suppressed_ = 0;
};

}  // namespace

class Connection;

struct TCPStoreServer::Impl {
  explicit Impl(const TCPStoreServerOptions& o)
      : opt(o), acceptor(io), backoff_timer(io), log_timer(io), shortage_timer(io) {}

  void accept();
  void accept_ready();
  void adopt(int fd, const tcp::endpoint& peer);
  void back_off(int err);
  void end_shortage_when_quiet();
  void evict_oldest_stranger(const char* why);
  void wake_waiters(const std::string& key);
  void keep_log_summaries();

  TCPStoreServerOptions opt;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer backoff_timer, log_timer;
  std::chrono::milliseconds backoff{0};
  asio::steady_timer shortage_timer;
  static constexpr std::chrono::milliseconds kShortageQuiet{1000};
  std::chrono::steady_clock::time_point last_exhausted;
  bool exhausted_logged = false;
  size_t refused_while_exhausted = 0;
  StoreData data;
  // Connections blocked in get/wait, by the first key they miss (a wait-any: by each of its
  // keys): a write wakes only those waiting on its key, so N ranks waiting on one key cost
  // O(1) per write, not O(N).
  std::unordered_map<std::string, std::list<std::shared_ptr<Connection>>> parked;
  std::list<std::shared_ptr<Connection>> strangers;  // not authenticated yet, oldest first
  size_t authenticated = 0;
  std::atomic<size_t> open{0};
  LogBudget stranger_log;
  // The first client that proved another secret (read by the hosting thread).
  mutable std::mutex wrong_secret_mu;
  std::optional<std::string> wrong_secret_peer;
  uint16_t port = 0;
  std::string address;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `peer` is the address accept4() gave, said only in log lines (so formatted only for them).
  Connection(tcp::socket s, const tcp::endpoint& peer, TCPStoreServer::Impl& srv)
      : sock_(std::move(s)), srv_(srv), timer_(srv.io), session_(srv.data, srv.opt.secret), peer_(peer),
        stranger_at_(srv.strangers.end()) {}

  bool is_open() const { return session_.open(); }
  ServerSession::Phase phase() const { return session_.phase(); }

  void start() {
    ++srv_.open;
    if (session_.open()) {
      ++srv_.authenticated;
      counted_open_ = true;
    } else {
      stranger_at_ = srv_.strangers.insert(srv_.strangers.end(), shared_from_this());
      timer_.expires_after(srv_.opt.auth_timeout);
      timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
        if (!ec && !self->session_.open())
          self->close_stranger("no authentication within " + std::to_string(self->srv_.opt.auth_timeout.count()) +
                               " ms");
      });
    }
    read_frame();
  }

  // A parked get/wait(-any) whose `key` was written: answers it when it is satisfied, else
  // parks it again (a wait: on the next key missing).
  void on_written(const std::string& key) {
    if (parked_at_.empty()) return;
    unpark(&key);
    auto keys = session_.park_keys();
    if (!keys.empty()) return park_on(keys);
    timer_.cancel();
    auto done = session_.try_finish();
    act(*done);
  }

  void close_stranger(const std::string& why) {
    srv_.stranger_log.warn("distrun store: closing unauthenticated connection from {}: {}", peer(), why);
    close();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    --srv_.open;
    if (counted_open_) --srv_.authenticated;
    timer_.cancel();
    unpark();
    leave_strangers();
    asio::error_code ec;
    sock_.close(ec);
    for (const auto& count : session_.on_close()) srv_.wake_waiters(count);
  }

 private:
  // Frames are read while a request is parked too: the client's close is seen at once rather
  // than when the wait times out, and its next frame either is a heartbeat (counted, the
  // request still parked) or ends the park, as if its time ran out, and is handled after
  // (one connection serves a client's thread parked in a wait and its other threads,
  // TCPStore::wait_any()). One read at a time, one write at a time.
  void read_frame() {
    if (reading_) return;
    reading_ = true;
    next_frame();
  }

  // A small frame, its header included, comes in one recv into in_ (and frames sent back to
  // back in one); a larger one's body is read into body_ once its header is checked.
  void next_frame() {
    if (in_len_ >= 4) {
      const uint32_t len = wire::read_u32(reinterpret_cast<const uint8_t*>(in_.data()));
      const uint32_t limit = session_.frame_limit(srv_.opt.max_frame);
      if (len > limit) {
        if (!session_.open())
          return close_stranger("refused a frame of " + std::to_string(len) + " bytes (limit " + std::to_string(limit) +
                                " before authentication)");
        log().warn("distrun store: refused a frame of {} bytes from {} (limit {}); closing that connection", len,
                   peer(), limit);
        return close();
      }
      const size_t have = in_len_ - 4;
      if (have >= len) {
        body_.assign(in_.data() + 4, len);
        in_len_ -= 4 + len;
        std::memmove(in_.data(), in_.data() + 4 + len, in_len_);
        return handle();
      }
      if (4 + size_t(len) > in_.size()) {
        body_.resize(len);
        std::memcpy(body_.data(), in_.data() + 4, have);
        in_len_ = 0;
        asio::async_read(sock_, asio::buffer(body_.data() + have, len - have),
                         [self = shared_from_this()](const asio::error_code& ec, size_t) {
                           if (ec) return self->close();
                           self->handle();
                         });
        return;
      }
    }
    sock_.async_read_some(asio::buffer(in_.data() + in_len_, in_.size() - in_len_),
                          [self = shared_from_this()](const asio::error_code& ec, size_t n) {
                            if (ec) return self->close();
                            self->in_len_ += n;
                            self->next_frame();
                          });
  }

  void handle() {
    reading_ = false;
    pending_ = writing_;
    if (pending_) return;  // handled once the reply being written is out
    if (!parked_at_.empty() && (body_.empty() || uint8_t(body_[0]) != uint8_t(wire::Cmd::Beat))) {
      timer_.cancel();
      unpark();
      auto t = session_.on_park_timeout();
      act(t);
      pending_ = true;
      return;
    }
    const bool was_open = session_.open();
    SessionAction a = session_.on_frame(body_);
    body_.clear();
    if (body_.capacity() > kKeptBody) body_.shrink_to_fit();
    if (!was_open && session_.open()) promote();
    if (closed_) return;
    act(a);
  }

  // Out of the strangers' pool into the ranks' one (or refused when that one is full).
  void promote() {
    leave_strangers();
    timer_.cancel();
    if (srv_.authenticated >= srv_.opt.max_connections) {
      log().warn("distrun store: connection limit ({}) reached; refusing {}", srv_.opt.max_connections, peer());
      return close();
    }
    ++srv_.authenticated;
    counted_open_ = true;
  }

  void act(SessionAction& a) {
    switch (a.kind) {
      case SessionAction::Close:
        if (!session_.open()) return close_stranger(a.why);
        log().warn("distrun store: closing {}: {}", peer(), a.why);
        return close();
      case SessionAction::Quiet:
        for (const auto& key : a.written) srv_.wake_waiters(key);
        return read_frame();
      case SessionAction::Park:
        park_on(session_.park_keys());
        ++park_gen_;
        timer_.expires_after(a.park_for);
        timer_.async_wait([self = shared_from_this(), gen = park_gen_](const asio::error_code& ec) {
          // Cancelled, or ended otherwise meanwhile (a handler already due is not cancelled).
          if (ec || self->closed_ || gen != self->park_gen_ || self->parked_at_.empty()) return;
          self->unpark();
          auto t = self->session_.on_park_timeout();
          self->act(t);
        });
        return read_frame();  // a frame already read ends the park at once
      case SessionAction::Reply:
      case SessionAction::ReplyThenClose: {
        const bool then_close = a.kind == SessionAction::ReplyThenClose;
        if (then_close) {
          srv_.stranger_log.warn("distrun store: refused {}: {}", peer(), a.why);
          std::lock_guard<std::mutex> lock(srv_.wrong_secret_mu);
          if (!srv_.wrong_secret_peer) srv_.wrong_secret_peer = peer();
        }
        out_ = wire::frame(session_.reply_payload(a));
        writing_ = true;
        asio::async_write(sock_, asio::buffer(out_),
                          [self = shared_from_this(), then_close](const asio::error_code& ec, size_t) {
                            self->writing_ = false;
                            if (ec || then_close) return self->close();
                            self->out_.clear();
                            if (self->pending_) return self->handle();
                            self->read_frame();
                          });
        for (const auto& key : a.written) srv_.wake_waiters(key);
        return;
      }
    }
  }

  // Out of the strangers' list, where it is there: by its place, not by a search (thousands of
  // agents connect at once).
  void leave_strangers() {
    if (stranger_at_ == srv_.strangers.end()) return;
    srv_.strangers.erase(stranger_at_);
    stranger_at_ = srv_.strangers.end();
  }

  void park_on(const std::vector<std::string>& keys) {
    for (const auto& key : keys) {
      auto& waiting = srv_.parked[key];
      parked_at_.emplace_back(key, waiting.insert(waiting.end(), shared_from_this()));
    }
  }

  // Out of every list it is parked in, but `woken`'s: wake_waiters() holds that one.
  void unpark(const std::string* woken = nullptr) {
    for (auto& [key, at] : parked_at_) {
      if (woken && key == *woken) continue;
      auto it = srv_.parked.find(key);
      it->second.erase(at);
      if (it->second.empty()) srv_.parked.erase(it);
    }
    parked_at_.clear();
  }

  std::string peer() const { return peer_.address().to_string() + ":" + std::to_string(peer_.port()); }

  // A frame's buffer is kept for the next one up to this size (most frames are far smaller).
  static constexpr size_t kKeptBody = 4096;

  tcp::socket sock_;
  TCPStoreServer::Impl& srv_;
  asio::steady_timer timer_;
  ServerSession session_;
  tcp::endpoint peer_;
  // Bytes read and not handled yet: the start of a frame, or frames sent back to back.
  std::array<char, 256> in_{};
  size_t in_len_ = 0;
  std::string body_, out_;
  bool closed_ = false;
  bool counted_open_ = false;  // counted in srv_.authenticated
  uint64_t park_gen_ = 0;      // which parked request the timer is for
  bool reading_ = false, writing_ = false;
  bool pending_ = false;                                          // body_ holds a frame read, not handled yet
  std::list<std::shared_ptr<Connection>>::iterator stranger_at_;  // in srv_.strangers, or its end()
  // Where it is parked: in srv_.parked[key], at the iterator.
  std::vector<std::pair<std::string, std::list<std::shared_ptr<Connection>>::iterator>> parked_at_;
};

void TCPStoreServer::Impl::wake_waiters(const std::string& key) {
  auto it = parked.find(key);
  if (it == parked.end()) return;
  auto woken = std::move(it->second);
  parked.erase(it);
  for (auto& c : woken) c->on_written(key);
}

// The oldest stranger that has not even asked for a challenge gives way first: a rank asks at
// once, so such a connection is the least likely to be one. Failing that, the oldest.
void TCPStoreServer::Impl::evict_oldest_stranger(const char* why) {
  if (strangers.empty()) return;
  auto victim = strangers.front();
  for (const auto& s : strangers)
    if (s->phase() == ServerSession::Phase::Fresh) {
      victim = s;
      break;
    }
  victim->close_stranger(why);  // close() removes it from the list
}

// Waits for the listening socket to be readable, then accepts with accept4(): close-on-exec
// from the first instant (asio's accept leaves the descriptor inheritable), and the errno
// itself in hand to tell "out of descriptors" from the rest.
void TCPStoreServer::Impl::accept() {
  acceptor.async_wait(tcp::acceptor::wait_read, [this](const asio::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) return back_off(ec.value());
    accept_ready();
  });
}

void TCPStoreServer::Impl::accept_ready() {
  for (int batch = 0; batch < 64; ++batch) {
    tcp::endpoint peer;
    socklen_t len = socklen_t(peer.capacity());
    int fd = ::accept4(acceptor.native_handle(), peer.data(), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      peer.resize(len);
      adopt(fd, peer);
      continue;
    }
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      // Every waiting connection was taken: the shortage, if there was one, may be over.
      if (exhausted_logged) end_shortage_when_quiet();
      backoff = std::chrono::milliseconds(0);
      break;
    }
    if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
    return back_off(err);
  }
  accept();
}

// A shortage ends once accept() has gone kShortageQuiet without running out: a trickle of
// connections that each find the descriptors short again is one episode, said in one line,
// and its end in one more.
void TCPStoreServer::Impl::end_shortage_when_quiet() {
  const auto quiet = std::chrono::steady_clock::now() - last_exhausted;
  if (quiet >= kShortageQuiet) {
    log().info("distrun store: accepting connections again ({} accept attempts failed for want of descriptors)",
               refused_while_exhausted);
    exhausted_logged = false;
    refused_while_exhausted = 0;
    return;
  }
  shortage_timer.expires_after(kShortageQuiet - quiet);
  shortage_timer.async_wait([this](const asio::error_code& ec) {
    if (!ec && exhausted_logged) end_shortage_when_quiet();
  });
}

// accept() failed: never retry at once (the socket stays readable, so that would spin). Out
// of descriptors, the oldest strangers give theirs up; the shortage is logged once, until
// the waiting connections are all taken again.
void TCPStoreServer::Impl::back_off(int err) {
  const bool exhausted = err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
  if (exhausted) {
    ++refused_while_exhausted;
    last_exhausted = std::chrono::steady_clock::now();
    if (!exhausted_logged)
      log().warn(
          "distrun store: cannot accept a connection: {} (out of file descriptors); backing off, and "
          "closing the oldest unauthenticated connection to make room (logged once until accepting works)",
          std::strerror(err));
    exhausted_logged = true;
    for (int i = 0; i < 8 && !strangers.empty(); ++i) evict_oldest_stranger("the store ran out of descriptors");
  } else {
    stranger_log.warn("distrun store: accept failed: {}; backing off", std::strerror(err));
  }
  backoff = std::clamp(backoff * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(500));
  backoff_timer.expires_after(backoff);
  backoff_timer.async_wait([this](const asio::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    accept_ready();
  });
}

void TCPStoreServer::Impl::adopt(int fd, const tcp::endpoint& peer) {
  tcp::socket sock(io);
  asio::error_code ec;
  sock.assign(peer.protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  sock.set_option(tcp::no_delay(true), ec);
  auto c = std::make_shared<Connection>(std::move(sock), peer, *this);
  if (!c->is_open()) {
    // The strangers' pool is full: the oldest gives way, so a flood cannot lock out a rank
    // that proves the secret within one round trip.
    if (strangers.size() >= opt.max_unauthenticated) evict_oldest_stranger("too many unauthenticated connections");
  } else if (authenticated >= opt.max_connections) {
    log().warn("distrun store: connection limit ({}) reached; refusing a connection", opt.max_connections);
    return;  // the socket closes with `c`
  }
  c->start();
}

void TCPStoreServer::Impl::keep_log_summaries() {
  log_timer.expires_after(LogBudget::kWindow);
  log_timer.async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    stranger_log.roll();
    keep_log_summaries();
  });
}

TCPStoreServer::TCPStoreServer(const TCPStoreServerOptions& options) : impl_(std::make_shared<Impl>(options)) {
  auto& a = impl_->acceptor;
  if (options.listen_fd >= 0) {
    // Adopted, not bound: the one who bound it already holds the port, so no race to lose.
    auto ls = inspect_listening_socket(options.listen_fd,
                                       "store server: listening descriptor " + std::to_string(options.listen_fd));
    fcntl(ls.fd, F_SETFD, fcntl(ls.fd, F_GETFD) | FD_CLOEXEC);  // not for the workers' own children
    a.assign(ls.ipv6 ? tcp::v6() : tcp::v4(), ls.fd);
    impl_->address = ls.address;
  } else {
    try {
      auto addr = asio::ip::make_address(options.host);
      tcp::endpoint ep(addr, options.port);
      int fd = ::socket(addr.is_v6() ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) throw std::system_error(errno, std::generic_category());
      a.assign(ep.protocol(), fd);
      a.set_option(tcp::acceptor::reuse_address(true));
      a.bind(ep);
      a.listen(asio::socket_base::max_listen_connections);
    } catch (const std::system_error& e) {
      std::string why = e.code() == asio::error::address_in_use ? "the port is already in use" : e.code().message();
      throw StoreError("store server: cannot listen on " + options.host + ":" + std::to_string(options.port) + ": " +
                       why);
    }
    impl_->address = a.local_endpoint().address().to_string();
  }
  impl_->port = a.local_endpoint().port();
  a.native_non_blocking(true);  // accept4() in accept_ready() must never block the loop
  impl_->accept();
  impl_->keep_log_summaries();
  thread_ = std::thread([impl = impl_] {
    try {
      impl->io.run();
    } catch (const std::exception& e) {
      log().error("distrun store server stopped: {}", e.what());
    }
  });
}

TCPStoreServer::~TCPStoreServer() {
  // Clean shutdown: stop the loop, then drop every session with the io_context.
  impl_->io.stop();
  if (thread_.joinable()) thread_.join();
  impl_->stranger_log.flush();
  impl_->parked.clear();
  impl_->strangers.clear();
}

uint16_t TCPStoreServer::port() const { return impl_->port; }
const std::string& TCPStoreServer::address() const { return impl_->address; }
size_t TCPStoreServer::connections() const { return impl_->open; }

std::optional<std::string> TCPStoreServer::wrong_secret_peer() const {
  std::lock_guard<std::mutex> lock(impl_->wrong_secret_mu);
  return impl_->wrong_secret_peer;
}

}  // namespace distrun
