// distrun-test-frame-relay LISTEN_IP:PORT SERVER_IP:PORT: a relay in the middle of a real
// job's store connections (tests/launcher/multihost_test.py, on namespace hosts) that records
// every frame the clients send and, told on stdin, attacks with them:
//   replay          every connection recorded so far, sent again as it was on a fresh
//                   connection to the server: "replay C: sent N, replies R, last refused
//                   0|1, closed 0|1" (the server's last frame an error: a refused proof)
//   repeat C|alter C  the next frame of connection C after its handshake is sent twice, or
//                   with one byte of its request changed; once the server closed that connection (or
//                   after 10 s): "repeat C: replies after R, closed 0|1, at T", R counting
//                   the server's frames from the first copy on, T when it went (time.time())
// It prints "ready" once it listens and "done" after each command, and relays until its stdin
// ends. Connections are numbered in the order the relay reached
// the server for them.
#include <poll.h>

#include <condition_variable>
#include <iostream>
#include <map>
#include <optional>

#include "distrun/store/auth.hpp"
#include "frame_relay.hpp"

using namespace distrun;
using namespace std::chrono_literals;

namespace {

std::pair<std::string, uint16_t> address(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("not IP:PORT: " + text);
  return {text.substr(0, colon), uint16_t(std::stoi(text.substr(colon + 1)))};
}

struct Replayed {
  int replies = 0;
  bool last_refused = false;  // the server's last frame said Error (unsealed: the handshake's)
  bool closed = false;
};

// Sends `frames` on a fresh connection to the server and reads its frames until it closes
// the connection or `within` passes.
Replayed replay(const std::string& ip, uint16_t port, const std::vector<std::string>& frames,
                std::chrono::milliseconds within) {
  int fd = test::connect_to(ip, port);
  if (fd < 0) throw std::runtime_error("replay: cannot reach the server");
  for (const std::string& f : frames) test::send_frame(fd, f);
  Replayed r;
  const auto deadline = std::chrono::steady_clock::now() + within;
  for (std::string p;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd pfd{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&pfd, 1, int(left.count())) <= 0) break;
    if (!test::read_frame(fd, p)) {
      r.closed = true;
      break;
    }
    ++r.replies;
    r.last_refused = !p.empty() && p[0] == char(wire::Status::Error);
  }
  ::close(fd);
  return r;
}

// What the relay does to the frames, and what it saw.
struct Attacks {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::vector<std::string>> recorded;  // per connection, the client's frames
  std::optional<int> armed;                          // the connection whose next frame is attacked
  bool alter = false;
  std::optional<int> replies_before;  // the server's frames on it before the attacked one
  double attacked_at = 0;             // when (seconds since the epoch, as time.time())

  std::vector<std::string> on_frame(test::FrameRelay* relay, int conn, int index, const std::string& payload) {
    std::lock_guard<std::mutex> l(mu);
    recorded[conn].push_back(payload);
    // Frames 0 and 1 are the handshake.
    if (armed != conn || index < 2 || replies_before) return {payload};
    replies_before = relay->replies(conn);
    attacked_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    cv.notify_all();
    if (!alter) return {payload, payload};
    std::string changed = payload;
    changed[changed.size() - auth::kTagBytes - 1] ^= 0x01;  // the request, not its tag
    return {changed};
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: distrun-test-frame-relay LISTEN_IP:PORT SERVER_IP:PORT\n";
    return 2;
  }
  try {
    const auto [listen_ip, listen_port] = address(argv[1]);
    const auto [server_ip, server_port] = address(argv[2]);
    Attacks attacks;
    test::FrameRelay* relay_ptr = nullptr;
    test::FrameRelay relay(listen_ip, listen_port, server_ip, server_port,
                           [&](int conn, int index, const std::string& payload) {
                             return attacks.on_frame(relay_ptr, conn, index, payload);
                           });
    relay_ptr = &relay;
    std::cout << "ready" << std::endl;
    for (std::string command; std::cin >> command;) {
      if (command == "replay") {
        std::map<int, std::vector<std::string>> recorded;
        {
          std::lock_guard<std::mutex> l(attacks.mu);
          recorded = attacks.recorded;
        }
        for (const auto& [conn, frames] : recorded) {
          const Replayed r = replay(server_ip, server_port, frames, 5s);
          std::cout << "replay " << conn << ": sent " << frames.size() << ", replies " << r.replies << ", last refused "
                    << r.last_refused << ", closed " << r.closed << std::endl;
        }
      } else if (command == "repeat" || command == "alter") {
        int conn = 0;
        std::cin >> conn;
        std::unique_lock<std::mutex> l(attacks.mu);
        attacks.armed = conn;
        attacks.alter = command == "alter";
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        attacks.cv.wait_until(l, deadline, [&] { return attacks.replies_before.has_value(); });
        const int before = attacks.replies_before.value_or(relay.replies(conn));
        const double at = attacks.attacked_at;
        l.unlock();
        while (!relay.server_closed(conn) && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(10ms);
        std::cout << command << " " << conn << ": replies after " << relay.replies(conn) - before << ", closed "
                  << relay.server_closed(conn) << ", at " << std::fixed << at << std::endl;
      }
      std::cout << "done" << std::endl;
    }
  } catch (const std::exception& e) {
    std::cerr << "distrun-test-frame-relay: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
