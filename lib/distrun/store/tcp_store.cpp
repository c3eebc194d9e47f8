// The TCPStore client. Blocking calls with deadlines: each request runs the socket's async
// operations on a private io_context until done or the deadline, then closes the socket.
#include "distrun/store/tcp_store.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <asio.hpp>
#include <cstdlib>
#include <deque>
#include <functional>
#include <thread>

#include "distrun/core/error.hpp"
#include "distrun/store/auth.hpp"

namespace distrun {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct TCPStore::Conn {
  // One request on the wire: its frame, then the reply's header and body. Held by the
  // connection, not by the caller, so that a reply given up on can still arrive and be read.
  struct Exchange {
    std::string out;
    std::array<uint8_t, 4> hdr{};
    std::string body;
    std::string reply, refused;  // the body opened (under the session's seal), or why it was not
    asio::error_code err;
    bool done = false;
  };

  asio::io_context io;
  tcp::socket sock{io};
  bool keep_on_timeout = false;
  // Requests sent and not answered yet, oldest first: the replies come in that order. One
  // given up on (a kept connection, or a wait that gave way) is read into its own exchange
  // and dropped, before the next one's.
  std::deque<std::shared_ptr<Exchange>> sending, awaiting;
  bool broken = false;
  std::string where;
  auth::FrameSeal seal;     // every frame after the handshake, both ways (auth.hpp)
  std::atomic<int> fd{-1};  // for abort() from another thread

  void submit(const std::shared_ptr<Exchange>& x, bool answered = true);
  void write_next();
  void read_next();
  void fail(const asio::error_code& ec);
  std::string result(Exchange& x);

  // Runs the queued async operations until `done` or `deadline`, stopping early when `stop`
  // says so; false on timeout, when the socket is closed (the connection broken) unless `keep`.
  bool run_until(Clock::time_point deadline, const bool& done, bool keep = false,
                 const std::function<bool()>& stop = {}) {
    io.restart();
    while (!done && Clock::now() < deadline && !(stop && stop())) {
      if (io.run_one_until(deadline) == 0 && io.stopped()) break;
    }
    if (done || keep) return done;
    give_up();
    return false;
  }
  // Closes the socket: every request in flight fails, and the connection is broken.
  void give_up() {
    asio::error_code ec;
    sock.close(ec);
    io.restart();
    io.run();  // let the cancelled handlers finish
    broken = true;
  }
};

namespace {

// The handshake was not answered (not a refusal): the connection closed, or (`silent`) it
// stood without a reply. Worth a retry.
struct HandshakeCut : std::runtime_error {
  HandshakeCut(const std::string& what, bool silent) : std::runtime_error(what), silent(silent) {}
  bool silent;
};

// A get/wait is answered by the server itself when its time runs out; the client waits a
// little longer, only to tell a server that stopped answering (frozen or gone). Other requests
// get the same slack, so a busy server (many ranks on few cores) is not taken for a dead one.
std::chrono::milliseconds with_slack(std::chrono::milliseconds t) {
  return std::chrono::milliseconds(wire::clamp_timeout_ms(t.count())) + 2s;
}

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
    so.max_connections = options.max_connections;
    so.max_unauthenticated = options.max_unauthenticated;
    server_ = std::make_unique<TCPStoreServer>(so);
    port_ = server_->port();
    // Talk to our own server over loopback unless it is bound to one address only.
    const std::string& bound = server_->address();
    connect_host = bound == "0.0.0.0" ? "127.0.0.1" : bound == "::" ? "::1" : bound;
  }
  conn_->where = host + ":" + std::to_string(port_);

  const auto deadline = Clock::now() + std::chrono::milliseconds(wire::clamp_timeout_ms(options.timeout.count()));
  std::string last_error = "no attempt";
  bool silent = false;  // the last try's connection was accepted, and its handshake had no reply
  auto backoff = 10ms;
  for (;;) {
    asio::error_code ec;
    bool cut = false;
    silent = false;
    tcp::resolver resolver(conn_->io);
    auto endpoints = resolver.resolve(connect_host, std::to_string(port_), ec);
    if (!ec) {
      // One endpoint at a time, each socket opened close-on-exec (asio's own connect leaves it
      // inheritable, and a rank's children must not hold the store's connection).
      for (const auto& entry : endpoints) {
        const tcp::endpoint ep = entry.endpoint();
        conn_->sock = tcp::socket(conn_->io);
        int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
          ec = asio::error_code(errno, asio::system_category());
          continue;
        }
        conn_->sock.assign(ep.protocol(), fd, ec);
        if (ec) {
          ::close(fd);
          continue;
        }
        bool done = false;
        conn_->sock.async_connect(ep, [&](const asio::error_code& e) {
          ec = e;
          done = true;
        });
        if (!conn_->run_until(std::min(deadline, Clock::now() + 5s), done)) ec = asio::error::timed_out;
        conn_->broken = false;
        if (!ec) break;
      }
      if (!ec) {
        conn_->sock.set_option(tcp::no_delay(true), ec);
        conn_->fd = conn_->sock.native_handle();
        if (secret.empty()) break;
        try {
          authenticate(secret, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
          break;
        } catch (const HandshakeCut& e) {
          // Closed before it answered (a server evicting strangers under a flood looks like
          // this) or silent (a stopped server's kernel still accepts): try again; a refused
          // secret is an answer, and is not retried.
          cut = true;
          silent = e.silent;
          last_error =
              std::string(silent ? "accepted, but no answer to the handshake: " : "closed during authentication: ") +
              e.what();
        }
      }
    }
    if (!cut) last_error = ec.message();
    if (Clock::now() + backoff >= deadline) {
      const std::string what = "store: could not connect to " + conn_->where + " within " +
                               std::to_string(options.timeout.count()) + " ms (" + last_error + ")";
      if (silent) throw StoreSilent(what);
      throw TimeoutError(what);
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 500ms);
  }
  conn_->keep_on_timeout = options.keep_on_timeout;  // from here on: a late handshake is retried, not kept
}

// Challenge-response (auth.hpp): the secret never crosses the wire, and the server proves it
// knows the secret too before this client writes anything to it.
void TCPStore::authenticate(const std::string& secret, std::chrono::milliseconds timeout) {
  wire::Request hello;
  hello.cmd = wire::Cmd::Hello;
  const std::string client_nonce = auth::random_bytes(auth::kNonceBytes);
  hello.keys = {client_nonce};
  const std::string server_nonce = handshake_step(hello, timeout);
  if (server_nonce.empty())
    throw StoreError("store: the server at " + conn_->where +
                     " asks for no job secret, but this process has one (DISTRUN_STORE_SECRET): not this job's store");
  if (server_nonce.size() != auth::kNonceBytes) throw StoreError("store: malformed challenge from " + conn_->where);
  wire::Request proof;
  proof.cmd = wire::Cmd::Auth;
  proof.keys = {auth::proof(secret, auth::Side::Client, server_nonce, client_nonce)};
  std::string theirs;
  try {
    theirs = handshake_step(proof, timeout);
  } catch (const HandshakeCut&) {
    throw;
  } catch (const StoreError& e) {
    throw StoreError("store: " + conn_->where +
                     " refused this process's job secret (DISTRUN_STORE_SECRET differs "
                     "from the store's?): " +
                     e.what());
  }
  if (!auth::equal_in_constant_time(theirs, auth::proof(secret, auth::Side::Server, server_nonce, client_nonce)))
    throw StoreError("store: the server at " + conn_->where + " could not prove the job secret: not this job's store");
  conn_->seal = auth::FrameSeal(auth::session_key(secret, server_nonce, client_nonce), auth::Side::Client);
}

std::string TCPStore::handshake_step(const wire::Request& r, std::chrono::milliseconds timeout) {
  try {
    return request(r, timeout);
  } catch (const StoreSilent& e) {
    throw HandshakeCut(e.what(), true);
  } catch (const TimeoutError& e) {
    throw HandshakeCut(e.what(), false);
  } catch (const StoreError& e) {
    if (conn_->broken) throw HandshakeCut(e.what(), false);
    throw;  // an answer: the server refused
  }
}

void TCPStore::interrupt_wait() {
  interrupted_ = true;
  asio::post(conn_->io, [] {});
}

void TCPStore::abort() {
  const int fd = conn_->fd.load();
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);  // the descriptor stays open (no reuse race) until ~TCPStore
}

TCPStore::~TCPStore() = default;

// Queues `x`: its frame goes after the frames before it, its reply (if `answered`) is read
// after theirs.
void TCPStore::Conn::submit(const std::shared_ptr<Exchange>& x, bool answered) {
  sending.push_back(x);
  if (sending.size() == 1) write_next();
  if (!answered) return;
  awaiting.push_back(x);
  if (awaiting.size() == 1) read_next();
}

void TCPStore::Conn::write_next() {
  auto x = sending.front();
  asio::async_write(sock, asio::buffer(x->out), [this, x](const asio::error_code& ec, size_t) {
    if (sending.empty() || sending.front() != x) return;  // failed meanwhile
    sending.pop_front();
    if (ec) return fail(ec);
    if (!sending.empty()) write_next();
  });
}

void TCPStore::Conn::read_next() {
  auto x = awaiting.front();
  asio::async_read(sock, asio::buffer(x->hdr), [this, x](const asio::error_code& ec, size_t) {
    if (awaiting.empty() || awaiting.front() != x) return;
    if (ec) return fail(ec);
    const uint32_t len = wire::read_u32(x->hdr.data());
    // A broken or hostile server must not make us allocate 4 GiB.
    if (len > wire::kMaxReply) return fail(asio::error::message_size);
    x->body.resize(len);
    asio::async_read(sock, asio::buffer(x->body), [this, x](const asio::error_code& ec2, size_t) {
      if (awaiting.empty() || awaiting.front() != x) return;
      if (ec2) return fail(ec2);
      // Opened here, in the order the replies come: the seal counts them, read or dropped.
      try {
        x->reply = std::string(seal.open(x->body));
      } catch (const StoreError& e) {
        x->refused = e.what();
      }
      x->done = true;
      awaiting.pop_front();
      if (!awaiting.empty()) read_next();
    });
  });
}

// The connection failed: every request in flight has that error for its answer.
void TCPStore::Conn::fail(const asio::error_code& ec) {
  for (auto& x : awaiting) {
    x->err = ec;
    x->done = true;
  }
  awaiting.clear();
  sending.clear();
}

// The result of a finished exchange, or the error it is.
std::string TCPStore::Conn::result(Exchange& x) {
  if (x.err) {
    broken = true;
    std::string why = x.err == asio::error::eof ? "connection closed by the server"
                      : x.err == asio::error::message_size
                          ? "a reply over the bound of " + std::to_string(wire::kMaxReply) + " bytes"
                          : x.err.message();
    throw StoreError("store: lost connection to " + where + ": " + why);
  }
  if (!x.refused.empty()) {
    broken = true;  // the session cannot be trusted any more
    throw StoreError("store: a reply from " + where + " was refused: " + x.refused);
  }
  const std::string& reply = x.reply;
  if (reply.empty()) throw StoreError("store: empty reply from " + where);
  auto st = wire::Status(uint8_t(reply[0]));
  std::string rest = reply.substr(1);
  if (st == wire::Status::Timeout) throw TimeoutError("store " + where + ": " + rest);
  if (st != wire::Status::Ok) throw StoreError("store " + where + ": " + rest);
  return rest;
}

std::string TCPStore::request(const wire::Request& r, std::chrono::milliseconds reply_timeout, bool gives_way) {
  reply_timeout = std::min(reply_timeout, std::chrono::milliseconds(wire::kMaxTimeoutMs) + 2s);  // no overflow
  const auto deadline = Clock::now() + reply_timeout;
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  if (gives_way) {
    // The other threads' requests first.
    std::unique_lock<std::mutex> way(way_mu_);
    way_cv_.wait_until(way, deadline, [&] { return wanting_ == 0; });
    way.unlock();
    lock.lock();
    if (interrupted_.exchange(false) || wanting_ > 0)
      throw WaitGaveWay("store " + conn_->where + ": a wait gave way to another request");
  } else {
    ++wanting_;
    if (parked_) asio::post(conn_->io, [] {});  // wakes the wait holding the connection: it gives way
    lock.lock();
    {
      std::lock_guard<std::mutex> way(way_mu_);
      --wanting_;
    }
    way_cv_.notify_all();
  }
  Conn& c = *conn_;
  if (c.broken) throw StoreError("store: connection to " + c.where + " was lost earlier");
  auto x = std::make_shared<Conn::Exchange>();
  x->out = wire::frame(c.seal.seal(wire::encode(r)));
  c.submit(x);
  // Replies given up on earlier come first (and are dropped).
  const bool earlier_due = c.awaiting.size() > 1;
  bool gave_way = false;
  if (gives_way) {
    parked_ = true;
    c.run_until(deadline, x->done, true, [&] { return gave_way = wanting_ > 0 || interrupted_; });
    parked_ = false;
  } else {
    c.run_until(deadline, x->done, true);
  }
  if (x->done) return c.result(*x);
  if (gave_way && !c.broken) {
    interrupted_ = false;
    // Any frame ends a parked wait at the server (with a timeout): both replies are read,
    // and dropped, before the next request's.
    auto ping = std::make_shared<Conn::Exchange>();
    ping->out = wire::frame(c.seal.seal(wire::encode(wire::Request{})));
    c.submit(ping);
    throw WaitGaveWay("store " + c.where + ": a wait gave way to another request");
  }
  if (!c.keep_on_timeout) c.give_up();
  throw StoreSilent("store: no reply from " + c.where + " within " + std::to_string(reply_timeout.count()) + " ms (" +
                    (earlier_due         ? "the reply to an earlier request is still due"
                     : c.keep_on_timeout ? "connection kept: the network or the server may be slow"
                                         : "server frozen?") +
                    ")");
}

void TCPStore::claim(const std::string& key, const std::string& value, const std::string& lost) {
  wire::Request r;
  r.cmd = wire::Cmd::Claim;
  r.keys = {key};
  if (!lost.empty()) r.keys.push_back(lost);
  r.value = value;
  request(r, with_slack(timeout_));
}

void TCPStore::set(const std::string& key, const std::string& value) {
  wire::Request r;
  r.cmd = wire::Cmd::Set;
  r.keys = {key};
  r.value = value;
  request(r, with_slack(timeout_));
}

std::string TCPStore::get(const std::string& key) {
  wire::Request r;
  r.cmd = wire::Cmd::Get;
  r.keys = {key};
  r.number = wire::clamp_timeout_ms(timeout_.count());
  return request(r, with_slack(timeout_));
}

int64_t TCPStore::add(const std::string& key, int64_t delta) { return add_request({wire::Cmd::Add, {key}, {}, delta}); }

int64_t TCPStore::add_marked(const std::string& key, int64_t delta, const std::string& mark, const std::string& value) {
  return add_request({wire::Cmd::Add, {key, mark}, value, delta});
}

int64_t TCPStore::add_request(const wire::Request& r) {
  std::string v = request(r, with_slack(timeout_));
  if (v.size() != 8) throw StoreError("store: malformed add reply");
  uint64_t u = 0;
  for (int i = 7; i >= 0; --i) u = (u << 8) | uint8_t(v[size_t(i)]);
  return int64_t(u);
}

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  wire::Request r;
  r.cmd = wire::Cmd::Wait;
  r.keys = keys;
  r.number = wire::clamp_timeout_ms(timeout.count());
  request(r, with_slack(timeout));
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  wire::Request r;
  r.cmd = wire::Cmd::Check;
  r.keys = keys;
  return request(r, with_slack(timeout_)) == std::string(1, '\1');
}

bool TCPStore::remove(const std::string& key) {
  wire::Request r;
  r.cmd = wire::Cmd::Remove;
  r.keys = {key};
  return request(r, with_slack(timeout_)) == std::string(1, '\1');
}

void TCPStore::beat(const std::string& key) {
  const wire::Request r{wire::Cmd::Beat, {key}, {}, 0};
  auto send = [this, r] {
    auto x = std::make_shared<Conn::Exchange>();
    x->out = wire::frame(conn_->seal.seal(wire::encode(r)));
    conn_->submit(x, false);
  };
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    // A wait holds the connection: its thread sends the beat, in order, and waits on.
    asio::post(conn_->io, send);
    return;
  }
  if (conn_->broken) throw StoreError("store: connection to " + conn_->where + " was lost earlier");
  send();
  conn_->io.restart();
  conn_->io.poll();  // the frame goes out now; what the socket cannot take yet, with the next request
}

size_t TCPStore::wait_any(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  wire::Request r;
  r.cmd = wire::Cmd::WaitAny;
  r.keys = keys;
  r.number = wire::clamp_timeout_ms(timeout.count());
  const std::string v = request(r, with_slack(timeout), true);
  if (v.size() != 4 || wire::read_u32(v.data()) >= keys.size()) throw StoreError("store: malformed wait-any reply");
  return wire::read_u32(v.data());
}

std::vector<std::optional<std::string>> TCPStore::multi_get(const std::vector<std::string>& keys) {
  wire::Request r;
  r.cmd = wire::Cmd::MultiGet;
  r.keys = keys;
  return wire::decode_values(request(r, with_slack(timeout_)), keys.size());
}

}  // namespace distrun
