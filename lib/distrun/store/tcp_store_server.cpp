// The TCPStore server: one asio io_context on one thread, every connection asynchronous, so a
// client that stalls mid-frame or never authenticates holds only its own socket.
#include "distrun/core/log.hpp"

#include <fcntl.h>

#include <algorithm>
#include <asio.hpp>
#include <list>
#include <map>

#include "distrun/core/error.hpp"
#include "distrun/store/hash_store.hpp"
#include "distrun/store/listen_socket.hpp"
#include "distrun/store/tcp_store.hpp"

namespace distrun {

using asio::ip::tcp;

namespace {

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Runs over the whole expected secret whatever the input, so timing leaks no prefix.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) diff |= uint8_t(i < a.size() ? a[i] : 0) ^ uint8_t(b[i]);
  return diff == 0;
}

std::string reply_payload(wire::Status st, const std::string& body = {}) {
  std::string p(1, char(st));
  p += body;
  return p;
}

}  // namespace

class Session;

struct TCPStoreServer::Impl {
  explicit Impl(const TCPStoreServerOptions& o) : opt(o), acceptor(io) {}

  void accept();
  void wake_waiters();
  bool has(const std::string& k) const { return data.count(k) > 0; }

  TCPStoreServerOptions opt;
  asio::io_context io;
  tcp::acceptor acceptor;
  std::map<std::string, std::string> data;
  std::list<std::shared_ptr<Session>> parked;  // sessions blocked in get/wait
  std::atomic<size_t> open{0};
  uint16_t port = 0;
  std::string address;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket s, TCPStoreServer::Impl& srv) : sock_(std::move(s)), srv_(srv), timer_(srv.io) {
    asio::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    peer_ = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
    authed_ = srv_.opt.secret.empty();
  }

  void start() {
    ++srv_.open;
    if (!authed_) {
      timer_.expires_after(srv_.opt.auth_timeout);
      timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
        if (!ec && !self->authed_) {
          log().warn("distrun store: closing {}: no authentication within {} ms", self->peer_,
                       self->srv_.opt.auth_timeout.count());
          self->close();
        }
      });
    }
    read_header();
  }

  // Tries to answer a parked get/wait; true when it did.
  bool try_finish() {
    for (const auto& k : req_.keys)
      if (!srv_.has(k)) return false;
    timer_.cancel();
    if (req_.cmd == wire::Cmd::Get)
      reply(wire::Status::Ok, srv_.data[req_.keys[0]]);
    else
      reply(wire::Status::Ok);
    return true;
  }

 private:
  void read_header() {
    asio::async_read(sock_, asio::buffer(hdr_), [self = shared_from_this()](const asio::error_code& ec, size_t) {
      if (ec) return self->close();
      uint32_t len = wire::read_u32(self->hdr_.data());
      // Before authentication only a secret fits: a stranger must not make us allocate.
      const uint32_t limit = self->authed_ ? self->srv_.opt.max_frame : std::min<uint32_t>(self->srv_.opt.max_frame, 4096);
      if (len > limit) {
        log().warn("distrun store: refused a frame of {} bytes from {} (limit {}); closing that connection",
                     len, self->peer_, limit);
        return self->close();
      }
      self->body_.resize(len);
      asio::async_read(self->sock_, asio::buffer(self->body_), [self](const asio::error_code& ec2, size_t) {
        if (ec2) return self->close();
        self->handle();
      });
    });
  }

  void handle() {
    try {
      req_ = wire::decode_request(body_);
    } catch (const StoreError& e) {
      log().warn("distrun store: closing {}: {}", peer_, e.what());
      return close();
    }
    body_.clear();
    body_.shrink_to_fit();
    if (!authed_) {
      if (req_.cmd != wire::Cmd::Auth || !constant_time_equal(req_.keys[0], srv_.opt.secret)) {
        log().warn("distrun store: refused {}: missing or wrong job secret", peer_);
        return close();
      }
      authed_ = true;
      timer_.cancel();
      return reply(wire::Status::Ok);
    }
    auto& data = srv_.data;
    switch (req_.cmd) {
      case wire::Cmd::Auth:
      case wire::Cmd::Ping: return reply(wire::Status::Ok);
      case wire::Cmd::Set:
        data[req_.keys[0]] = std::move(req_.value);
        reply(wire::Status::Ok);
        return srv_.wake_waiters();
      case wire::Cmd::Add: {
        auto it = data.find(req_.keys[0]);
        int64_t v;
        try {
          v = (it == data.end() ? 0 : parse_counter(req_.keys[0], it->second)) + req_.number;
        } catch (const StoreError& e) {
          return reply(wire::Status::Error, e.what());
        }
        data[req_.keys[0]] = std::to_string(v);
        std::string out;
        wire::put_i64(out, v);
        reply(wire::Status::Ok, out);
        return srv_.wake_waiters();
      }
      case wire::Cmd::Check: {
        bool all = true;
        for (const auto& k : req_.keys) all = all && srv_.has(k);
        return reply(wire::Status::Ok, std::string(1, char(all)));
      }
      case wire::Cmd::Remove: return reply(wire::Status::Ok, std::string(1, char(data.erase(req_.keys[0]) > 0)));
      case wire::Cmd::Get:
      case wire::Cmd::Wait: return park();
    }
  }

  void park() {
    if (try_finish()) return;
    srv_.parked.push_back(shared_from_this());
    timer_.expires_after(std::chrono::milliseconds(std::max<int64_t>(req_.number, 0)));
    timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
      if (ec) return;  // cancelled: answered
      self->unpark();
      std::string missing = missing_keys(self->req_.keys, [&](const std::string& k) { return self->srv_.has(k); });
      self->reply(wire::Status::Timeout, "timed out after " + std::to_string(self->req_.number) +
                                             " ms waiting for key(s) " + missing);
    });
  }

  void unpark() { srv_.parked.remove(shared_from_this()); }

  void reply(wire::Status st, const std::string& body = {}) {
    out_ = wire::frame(reply_payload(st, body));
    asio::async_write(sock_, asio::buffer(out_), [self = shared_from_this()](const asio::error_code& ec, size_t) {
      if (ec) return self->close();
      self->out_.clear();
      self->read_header();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    --srv_.open;
    timer_.cancel();
    unpark();
    asio::error_code ec;
    sock_.close(ec);
  }

  tcp::socket sock_;
  TCPStoreServer::Impl& srv_;
  asio::steady_timer timer_;
  std::array<uint8_t, 4> hdr_{};
  std::string body_, out_, peer_;
  wire::Request req_;
  bool authed_ = false, closed_ = false;
};

void TCPStoreServer::Impl::wake_waiters() {
  for (auto it = parked.begin(); it != parked.end();) {
    auto s = *it;
    if (s->try_finish())
      it = parked.erase(it);
    else
      ++it;
  }
}

void TCPStoreServer::Impl::accept() {
  acceptor.async_accept([this](const asio::error_code& ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      if (open >= opt.max_connections) {
        log().warn("distrun store: connection limit ({}) reached; refusing a connection", opt.max_connections);
        asio::error_code ignored;
        sock.close(ignored);
      } else {
        sock.set_option(tcp::no_delay(true));
        std::make_shared<Session>(std::move(sock), *this)->start();
      }
    }
    accept();
  });
}

TCPStoreServer::TCPStoreServer(const TCPStoreServerOptions& options) : impl_(std::make_shared<Impl>(options)) {
  auto& a = impl_->acceptor;
  if (options.listen_fd >= 0) {
    // Adopted, not bound: the one who bound it already holds the port, so no race to lose.
    auto ls = inspect_listening_socket(options.listen_fd, "store server: listening descriptor " +
                                                              std::to_string(options.listen_fd));
    fcntl(ls.fd, F_SETFD, fcntl(ls.fd, F_GETFD) | FD_CLOEXEC);  // not for the workers' own children
    a.assign(ls.ipv6 ? tcp::v6() : tcp::v4(), ls.fd);
    impl_->address = ls.address;
  } else {
    try {
      auto addr = asio::ip::make_address(options.host);
      tcp::endpoint ep(addr, options.port);
      a.open(ep.protocol());
      a.set_option(tcp::acceptor::reuse_address(true));
      a.bind(ep);
      a.listen(asio::socket_base::max_listen_connections);
    } catch (const std::system_error& e) {
      std::string why = e.code() == asio::error::address_in_use ? "the port is already in use" : e.code().message();
      throw StoreError("store server: cannot listen on " + options.host + ":" + std::to_string(options.port) +
                       ": " + why);
    }
    impl_->address = a.local_endpoint().address().to_string();
  }
  impl_->port = a.local_endpoint().port();
  impl_->accept();
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
  impl_->parked.clear();
}

uint16_t TCPStoreServer::port() const { return impl_->port; }
const std::string& TCPStoreServer::address() const { return impl_->address; }
size_t TCPStoreServer::connections() const { return impl_->open; }

}  // namespace distrun
