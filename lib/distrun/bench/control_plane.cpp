#include "distrun/bench/control_plane.hpp"
#include "distrun/bench/control_plane_processes.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "distrun/core/error.hpp"
#include "distrun/store/auth.hpp"
#include "distrun/store/protocol.hpp"
#include "distrun/store/tcp_store.hpp"

namespace distrun::bench {

namespace {

using namespace control_plane;

const std::string kCountKey = "joined/count", kGateKey = "joined/all";
std::string joined_key(int64_t i) { return "joined/" + std::to_string(i); }

// distrun's store server: says its port, serves until its pipe closes, then says its usage.
Child start_distrun_server(const ControlPlaneOptions& o, const std::string& secret) {
  return fork_child("the store server", {}, [&](int in, int out) {
    raise_fd_limit(o.clients + kSpareFds);
    TCPStoreServerOptions so;
    so.host = "127.0.0.1";
    so.secret = secret;
    so.max_connections = size_t(o.clients) + 16;
    auto server = std::make_unique<TCPStoreServer>(so);
    write_line(out, std::to_string(server->port()));
    char c;
    while (::read(in, &c, 1) > 0) {
    }
    server.reset();
    write_line(out, own_usage());
    return 0;
  });
}

// torch's TCPStore (its C++ server, driven from Python), with the same pipe conversation.
Child start_torch_server(const ControlPlaneOptions& o) {
  static const char* script = R"(
import datetime, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=600), wait_for_workers=False)
print(store.port, flush=True)
sys.stdin.read()
u = resource.getrusage(resource.RUSAGE_SELF)
print(u.ru_maxrss, u.ru_utime + u.ru_stime, flush=True)
)";
  const std::string python = o.python;
  return fork_child("torch's store server", {}, [&](int in, int out) {
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::execl(python.c_str(), python.c_str(), "-c", script, static_cast<char*>(nullptr));
    throw ConfigError("cannot run " + python + ": " + std::strerror(errno));
    return 127;
  });
}

// ---- the clients -------------------------------------------------------------------------

enum class Step { Connecting, Hello, Proof, Ready, Mark, Add, Set, Wait, Done };

struct Client {
  int fd = -1;
  Step step = Step::Connecting;
  std::string in, out;
  std::string client_nonce, server_nonce;
  auth::FrameSeal seal;
  bool watched = false, watching_out = false;
};

std::string torch_str(std::string_view s) {
  std::string out;
  const uint64_t n = s.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out.append(s);
  return out;
}

// The clients of one process: `count` of them, numbered from `first` (for their addresses).
class ClientSet {
 public:
  ClientSet(const ControlPlaneOptions& o, uint16_t port, std::string secret, int64_t first, int64_t count,
            int64_t window)
      : o_(o), port_(port), secret_(std::move(secret)), first_(first), clients_(size_t(count)), window_(window) {
    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) throw StoreError("epoll_create1: " + std::string(std::strerror(errno)));
  }

  // Opens (and authenticates) every client, `window` at a time.
  void connect_all(double deadline) {
    size_t next = 0;
    while (ready_ < clients_.size()) {
      while (next < clients_.size() && int64_t(next - ready_) < window_) open(next++);
      pump(deadline, "connecting");
    }
  }

  // Every client sets its own key and (counter) adds one to the count, the last one in
  // setting the gate all wait on, or (keys) waits for every client's key.
  void barrier(double deadline) {
    if (o_.barrier == "keys")
      for (int64_t i = 0; i < o_.clients; ++i) all_keys_.push_back(joined_key(i));
    for (size_t i = 0; i < clients_.size(); ++i) {
      Client& c = clients_[i];
      const std::string mark = joined_key(first_ + int64_t(i));
      if (all_keys_.empty()) {
        c.step = Step::Add;
        send(c, add_request(c, mark));
      } else if (!torch()) {
        c.step = Step::Mark;
        send(c, set_request(c, mark, "1"));
      } else {  // a set has no reply there: the next request goes with it
        c.step = Step::Wait;
        send(c, set_request(c, mark, "1") + wait_request(c, all_keys_));
      }
    }
    while (done_ < clients_.size()) pump(deadline, "in the barrier");
  }

 private:
  bool torch() const { return o_.server == "torch"; }

  void open(size_t i) {
    Client& c = clients_[i];
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) throw StoreError("socket: " + std::string(std::strerror(errno)));
    const int one = 1;
    ::setsockopt(c.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(loopback_address(first_ + int64_t(i), o_.per_address));
    if (::bind(c.fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0)
      throw StoreError("bind to a loopback source address: " + std::string(std::strerror(errno)));
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(port_);
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0 && errno != EINPROGRESS)
      throw StoreError("connect: " + std::string(std::strerror(errno)));
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u64 = i;
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev);
  }

  void pump(double deadline, const char* doing) {
    epoll_event evs[512];
    const double left = deadline - now_s();
    if (left <= 0)
      throw TimeoutError(std::to_string(clients_.size() - (ready_ < clients_.size() ? ready_ : done_)) + " of " +
                         std::to_string(clients_.size()) + " clients still " + doing);
    const int n = ::epoll_wait(ep_, evs, 512, std::min(1000, int(left * 1000) + 1));
    for (int k = 0; k < n; ++k) {
      Client& c = clients_[evs[k].data.u64];
      if (c.step == Step::Connecting) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) throw StoreError("connect: " + std::string(std::strerror(err)));
        watch(c, evs[k].data.u64, false);
        start(c);
        continue;
      }
      if (evs[k].events & EPOLLOUT) flush(c, evs[k].data.u64);
      if (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) receive(c);
    }
  }

  // Readable always; writable only while bytes wait to be sent (epoll_ctl only on a change).
  void watch(Client& c, uint64_t i, bool out) {
    if (c.watched && c.watching_out == out) return;
    c.watched = true;
    c.watching_out = out;
    epoll_event ev{};
    ev.events = out ? uint32_t(EPOLLIN | EPOLLOUT) : uint32_t(EPOLLIN);
    ev.data.u64 = i;
    ::epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  void start(Client& c) {
    if (torch() || secret_.empty()) return connected(c);
    c.step = Step::Hello;
    c.client_nonce = auth::random_bytes(auth::kNonceBytes);
    send(c, wire::frame(wire::encode({wire::Cmd::Hello, {c.client_nonce}, {}, 0})));
  }

  void connected(Client& c) {
    c.step = Step::Ready;
    ++ready_;
  }

  void send(Client& c, const std::string& bytes) {
    c.out += bytes;
    flush(c, size_t(&c - clients_.data()));
  }

  void flush(Client& c, uint64_t i) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return watch(c, i, true);
      if (n < 0) throw StoreError("send: " + std::string(std::strerror(errno)));
      c.out.erase(0, size_t(n));
    }
    watch(c, i, false);
  }

  void receive(Client& c) {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.in.append(buf, size_t(n));
        if (size_t(n) < sizeof buf) break;  // all there was: asking again would only say so
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      throw StoreError("the server closed a connection (" +
                       std::string(n == 0 ? "end of stream" : std::strerror(errno)) + ")");
    }
    while (torch() ? torch_reply(c) : distrun_reply(c)) {
    }
  }

  // ---- distrun's protocol

  std::string sealed(const wire::Request& r, Client& c) { return wire::frame(c.seal.seal(wire::encode(r))); }

  bool distrun_reply(Client& c) {
    if (c.in.size() < 4) return false;
    const uint32_t len = wire::read_u32(c.in.data());
    if (c.in.size() < 4 + size_t(len)) return false;
    std::string payload = c.in.substr(4, len);
    c.in.erase(0, 4 + size_t(len));
    std::string_view body = c.seal.open(payload);
    if (body.empty() || body[0] != char(wire::Status::Ok))
      throw StoreError("the server refused a request: " + std::string(body.substr(body.empty() ? 0 : 1)));
    body.remove_prefix(1);
    switch (c.step) {
      case Step::Hello: {
        if (body.size() != auth::kNonceBytes) throw StoreError("the server sent no challenge");
        c.server_nonce = std::string(body);
        c.step = Step::Proof;
        send(c, wire::frame(wire::encode({wire::Cmd::Auth,
                                          {auth::proof(secret_, auth::Side::Client, c.server_nonce, c.client_nonce)},
                                          {},
                                          0})));
        break;
      }
      case Step::Proof:
        if (!auth::equal_in_constant_time(body,
                                          auth::proof(secret_, auth::Side::Server, c.server_nonce, c.client_nonce)))
          throw StoreError("the server did not prove the job secret");
        c.seal = auth::FrameSeal(auth::session_key(secret_, c.server_nonce, c.client_nonce), auth::Side::Client);
        connected(c);
        break;
      case Step::Mark:
        c.step = Step::Wait;
        send(c, wait_request(c, all_keys_));
        break;
      case Step::Add: {
        if (body.size() != 8) throw StoreError("a malformed add reply");
        int64_t v = 0;
        std::memcpy(&v, body.data(), 8);
        after_add(c, v);
        break;
      }
      case Step::Set:
        c.step = Step::Wait;
        send(c, wait_request(c, {kGateKey}));
        break;
      case Step::Wait: finished(c); break;
      default: throw StoreError("a reply nobody asked for");
    }
    return true;
  }

  // ---- torch's protocol (c10d's TCPStore: a query byte, u64-length strings, raw integers;
  // set has no reply)

  bool torch_reply(Client& c) {
    if (c.step == Step::Add) {
      if (c.in.size() < 8) return false;
      int64_t v = 0;
      std::memcpy(&v, c.in.data(), 8);
      c.in.erase(0, 8);
      after_add(c, v);
      return true;
    }
    if (c.step == Step::Wait) {
      if (c.in.empty()) return false;
      c.in.erase(0, 1);
      finished(c);
      return true;
    }
    if (!c.in.empty()) throw StoreError("a reply nobody asked for");
    return false;
  }

  std::string set_request(Client& c, const std::string& key, const std::string& value) {
    if (!torch()) return sealed({wire::Cmd::Set, {key}, value, 0}, c);
    return std::string(1, char(0)) + torch_str(key) + torch_str(value);
  }

  // Marks the client `mark` and adds one to the count: one request to distrun's store, as
  // ProcessGroup::init joins (TCPStore::add_marked); torch's a set (no reply) and an add.
  std::string add_request(Client& c, const std::string& mark) {
    if (!torch()) return sealed({wire::Cmd::Add, {kCountKey, mark}, "1", 1}, c);
    const int64_t one = 1;
    return set_request(c, mark, "1") + std::string(1, char(3)) + torch_str(kCountKey) +
           std::string(reinterpret_cast<const char*>(&one), 8);
  }

  std::string wait_request(Client& c, const std::vector<std::string>& keys) {
    if (!torch()) return sealed({wire::Cmd::Wait, keys, {}, o_.timeout.count()}, c);
    const uint64_t n = keys.size();
    std::string out(1, char(5));
    out.append(reinterpret_cast<const char*>(&n), 8);
    for (const auto& k : keys) out += torch_str(k);
    return out;
  }

  void after_add(Client& c, int64_t v) {
    if (v != o_.clients) {
      c.step = Step::Wait;
      return send(c, wait_request(c, {kGateKey}));
    }
    if (torch()) {
      c.step = Step::Wait;
      return send(c, set_request(c, kGateKey, "1") + wait_request(c, {kGateKey}));
    }
    c.step = Step::Set;
    send(c, set_request(c, kGateKey, "1"));
  }

  void finished(Client& c) {
    c.step = Step::Done;
    ++done_;
  }

  const ControlPlaneOptions& o_;
  uint16_t port_;
  std::string secret_;
  int64_t first_;
  std::vector<Client> clients_;
  int64_t window_;
  int ep_ = -1;
  size_t ready_ = 0, done_ = 0;
  std::vector<std::string> all_keys_;  // barrier "keys": what each client waits for
};

// One client process: connects on 'c', says when all are connected, runs the barrier on 'b',
// says when all are through, and keeps its connections until its pipe closes.
int client_process(const ControlPlaneOptions& o, uint16_t port, const std::string& secret, int64_t first, int64_t count,
                   int64_t window, int in, int out) {
  raise_fd_limit(count + kSpareFds);
  ClientSet set(o, port, secret, first, count, window);
  char c = 0;
  if (::read(in, &c, 1) != 1) return 1;
  const double deadline = now_s() + double(o.timeout.count()) / 1000;
  set.connect_all(deadline);
  write_line(out, "connected " + std::to_string(now_s()));
  if (::read(in, &c, 1) != 1) return 1;
  set.barrier(deadline);
  write_line(out, "done " + std::to_string(now_s()));
  while (::read(in, &c, 1) > 0) {
  }
  return 0;
}

}  // namespace

ControlPlaneResult run_control_plane(const ControlPlaneOptions& o) {
  if (o.role != "store")
    throw ConfigError("--role " + o.role +
                      ": this loads the store (the rendezvous role is launcher::run_rendezvous_load)");
  if (o.server != "distrun" && o.server != "torch") throw ConfigError("--server: distrun or torch");
  if (o.clients < 1) throw ConfigError("--clients: at least 1");
  if (o.per_address < 1 || o.per_address > 28000) throw ConfigError("--per-address: 1 to 28000 (the ephemeral ports)");
  if (o.in_flight < 1) throw ConfigError("--in-flight: at least 1");
  if (o.barrier != "counter" && o.barrier != "keys") throw ConfigError("--barrier: counter or keys");
  const int64_t limit = raise_fd_limit(o.clients + kSpareFds);
  if (o.clients + kSpareFds > limit)
    throw ConfigError("--clients " + std::to_string(o.clients) + ": the server needs " +
                      std::to_string(o.clients + kSpareFds) + " descriptors, and this process may open " +
                      std::to_string(limit) + " (RLIMIT_NOFILE's hard limit; raising it needs CAP_SYS_RESOURCE)");

  ControlPlaneResult r;
  r.options = o;
  const std::string secret = o.server == "torch" ? "" : auth::random_bytes(16);
  Child server = o.server == "torch" ? start_torch_server(o) : start_distrun_server(o, secret);
  std::vector<Child> procs;
  const ServerUsage usage = run_processes(server, procs, [&] {
    const double start_deadline = now_s() + 60;
    const auto port = uint16_t(number_in("port " + server.line(start_deadline), "port"));
    const int64_t per_proc = limit - kSpareFds;
    const int64_t nproc = (o.clients + per_proc - 1) / per_proc;
    const int64_t window = std::max<int64_t>(1, o.in_flight / nproc);
    std::vector<int> parent_fds{server.to, server.from};
    for (int64_t p = 0; p < nproc; ++p) {
      const int64_t first = p * o.clients / nproc, count = (p + 1) * o.clients / nproc - first;
      procs.push_back(fork_child("client process " + std::to_string(p), parent_fds, [&](int in, int out) {
        return client_process(o, port, secret, first, count, window, in, out);
      }));
      parent_fds.push_back(procs.back().to);
      parent_fds.push_back(procs.back().from);
    }
    r.client_processes = int(nproc);
    const double deadline = now_s() + double(o.timeout.count()) / 1000 + 5;
    const double t0 = now_s();
    for (auto& p : procs) p.say('c');
    double connected = t0;
    for (auto& p : procs) connected = std::max(connected, number_in(p.line(deadline), "connected"));
    r.connect_s = connected - t0;
    const double t1 = now_s();
    for (auto& p : procs) p.say('b');
    double through = t1;
    for (auto& p : procs) through = std::max(through, number_in(p.line(deadline), "done"));
    r.barrier_s = through - t1;
  });
  r.server_peak_rss_mb = usage.peak_rss_mb;
  r.server_cpu_s = usage.cpu_s;
  return r;
}

std::string control_plane_json(const ControlPlaneResult& r) {
  nlohmann::ordered_json j;
  j["role"] = r.options.role;
  j["server"] = r.options.server;
  j["clients"] = r.options.clients;
  if (r.options.role == "store") j["barrier"] = r.options.barrier;
  j["client_processes"] = r.client_processes;
  j["connect_s"] = r.connect_s;
  if (r.options.role == "rendezvous") {
    j["interval_ms"] = r.options.interval.count();
    j["round_s"] = r.round_s;
    j["heartbeat_cpu_pct"] = r.heartbeat_cpu_pct;
    j["failure_fanout_s"] = r.failure_fanout_s;
  } else {
    j["barrier_s"] = r.barrier_s;
  }
  j["server_peak_rss_mb"] = r.server_peak_rss_mb;
  j["server_cpu_s"] = r.server_cpu_s;
  return j.dump();
}

}  // namespace distrun::bench
