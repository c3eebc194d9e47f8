// The TCPStore client. Blocking calls with deadlines: each request runs the socket's async
// operations on a private io_context until done or the deadline, then closes the socket.
#include "distrun/store/tcp_store.hpp"

#include <asio.hpp>
#include <cstdlib>
#include <thread>

#include "distrun/core/error.hpp"

namespace distrun {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct TCPStore::Conn {
  asio::io_context io;
  tcp::socket sock{io};
  bool broken = false;
  std::string where;

  // Runs the queued async operations until `done` or `deadline`; false on timeout.
  bool run_until(Clock::time_point deadline, const bool& done) {
    io.restart();
    while (!done && Clock::now() < deadline) {
      if (io.run_one_until(deadline) == 0 && io.stopped()) break;
    }
    if (done) return true;
    asio::error_code ec;
    sock.close(ec);
    io.restart();
    io.run();  // let the cancelled handlers finish
    broken = true;
    return false;
  }
};

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace

TCPStore::TCPStore(const std::string& host, uint16_t port, const TCPStoreOptions& options)
    : host_(host), port_(port), conn_(std::make_unique<Conn>()) {
  timeout_ = options.timeout;
  const std::string secret = options.secret.empty() ? env_or("DISTRUN_STORE_SECRET", "") : options.secret;
  std::string connect_host = host;
  if (options.is_server) {
    TCPStoreServerOptions so;
    so.host = options.bind_host.empty() ? "0.0.0.0" : options.bind_host;
    so.port = port;
    so.secret = secret;
    so.listen_fd = options.listen_fd;
    server_ = std::make_unique<TCPStoreServer>(so);
    port_ = server_->port();
    // Talk to our own server over loopback unless it is bound to one address only.
    const std::string& bound = server_->address();
    connect_host = bound == "0.0.0.0" ? "127.0.0.1" : bound == "::" ? "::1" : bound;
  }
  conn_->where = host + ":" + std::to_string(port_);

  const auto deadline = Clock::now() + options.timeout;
  std::string last_error = "no attempt";
  auto backoff = 10ms;
  for (;;) {
    asio::error_code ec;
    tcp::resolver resolver(conn_->io);
    auto endpoints = resolver.resolve(connect_host, std::to_string(port_), ec);
    if (!ec) {
      bool done = false;
      conn_->sock = tcp::socket(conn_->io);
      asio::async_connect(conn_->sock, endpoints, [&](const asio::error_code& e, const tcp::endpoint&) {
        ec = e;
        done = true;
      });
      if (!conn_->run_until(std::min(deadline, Clock::now() + 5s), done)) ec = asio::error::timed_out;
      conn_->broken = false;
      if (!ec) break;
    }
    last_error = ec.message();
    if (Clock::now() + backoff >= deadline)
      throw TimeoutError("store: could not connect to " + conn_->where + " within " +
                         std::to_string(options.timeout.count()) + " ms (" + last_error + ")");
    std::this_thread::sleep_for(backoff);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 500ms);
  }
  conn_->sock.set_option(tcp::no_delay(true));
  if (!secret.empty()) {
    wire::Request r;
    r.cmd = wire::Cmd::Auth;
    r.keys = {secret};
    request(r, options.timeout);
  }
}

TCPStore::~TCPStore() = default;

std::string TCPStore::request(const wire::Request& r, std::chrono::milliseconds reply_timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  Conn& c = *conn_;
  if (c.broken) throw StoreError("store: connection to " + c.where + " was lost earlier");
  const std::string out = wire::frame(wire::encode(r));
  std::array<uint8_t, 4> hdr{};
  std::string body;
  asio::error_code err;
  bool done = false;
  asio::async_write(c.sock, asio::buffer(out), [&](const asio::error_code& ec, size_t) {
    if (ec) {
      err = ec;
      done = true;
      return;
    }
    asio::async_read(c.sock, asio::buffer(hdr), [&](const asio::error_code& ec2, size_t) {
      if (ec2) {
        err = ec2;
        done = true;
        return;
      }
      body.resize(wire::read_u32(hdr.data()));
      asio::async_read(c.sock, asio::buffer(body), [&](const asio::error_code& ec3, size_t) {
        err = ec3;
        done = true;
      });
    });
  });
  // The server answers a timed-out wait itself; the extra slack only covers a dead server.
  if (!c.run_until(Clock::now() + reply_timeout + 5s, done))
    throw TimeoutError("store: no reply from " + c.where + " within " + std::to_string(reply_timeout.count()) +
                       " ms (server frozen?)");
  if (err) {
    c.broken = true;
    std::string why = err == asio::error::eof ? "connection closed by the server" : err.message();
    throw StoreError("store: lost connection to " + c.where + ": " + why);
  }
  if (body.empty()) throw StoreError("store: empty reply from " + c.where);
  auto st = wire::Status(uint8_t(body[0]));
  std::string rest = body.substr(1);
  if (st == wire::Status::Timeout) throw TimeoutError("store " + c.where + ": " + rest);
  if (st != wire::Status::Ok) throw StoreError("store " + c.where + ": " + rest);
  return rest;
}

void TCPStore::set(const std::string& key, const std::string& value) {
  wire::Request r;
  r.cmd = wire::Cmd::Set;
  r.keys = {key};
  r.value = value;
  request(r, timeout_);
}

std::string TCPStore::get(const std::string& key) {
  wire::Request r;
  r.cmd = wire::Cmd::Get;
  r.keys = {key};
  r.number = timeout_.count();
  return request(r, timeout_);
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  wire::Request r;
  r.cmd = wire::Cmd::Add;
  r.keys = {key};
  r.number = delta;
  std::string v = request(r, timeout_);
  if (v.size() != 8) throw StoreError("store: malformed add reply");
  uint64_t u = 0;
  for (int i = 7; i >= 0; --i) u = (u << 8) | uint8_t(v[size_t(i)]);
  return int64_t(u);
}

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  wire::Request r;
  r.cmd = wire::Cmd::Wait;
  r.keys = keys;
  r.number = timeout.count();
  request(r, timeout);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  wire::Request r;
  r.cmd = wire::Cmd::Check;
  r.keys = keys;
  return request(r, timeout_) == std::string(1, '\1');
}

bool TCPStore::remove(const std::string& key) {
  wire::Request r;
  r.cmd = wire::Cmd::Remove;
  r.keys = {key};
  return request(r, timeout_) == std::string(1, '\1');
}

}  // namespace distrun
