// The one listening socket of a process for the socket path's pairs, and the handshake that
// lets a connection in: shared by every group bound to the same address, so a process with many
// groups holds one listener, not one per group.
//
// The handshake proves a secret that never crosses the wire. Each group has a key, HKDF-SHA256
// of the workers' secret (DISTRUN_STORE_SECRET) with the group's id (16 random bytes its rank 0
// publishes) as salt; without a workers' secret (ranks started directly on one host, whose
// store is bound to loopback) the input is 32 random bytes published in that loopback store.
// The lower rank of a pair connects and sends one hello: the group's id, both ranks, a fresh
// nonce and HMAC(key, "connect", group, ranks, nonce). The listener checks it in constant time
// and lets each lower rank in once in its group's life, so a recorded hello is refused: the
// real one was queued ahead of any copy a sniffer could send (it had to see it first). The
// acceptor answers HMAC(key, "accept", group, ranks, nonce), which the connector reads as the
// connection's first bytes before any message: it knows it reached the member, not a stranger.
// The hello needs no answer before data may follow, so a first send never waits on the peer.
//
// Nothing here blocks: connections whose hello is incomplete wait in a list bounded by what the
// members expect plus a margin (so members never crowd each other out), read as
// their bytes come by whichever group's wait polls them, and dropped at a bound; a stranger that
// sends garbage is dropped at once, one that says nothing holds a slot, never a wait. A group
// registers (join) before it publishes its address, so a member's connection never precedes
// its group; a hello naming no registered group is dropped.
#pragma once
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace distrun {

namespace pair_auth {

constexpr size_t kGroupBytes = 16;
constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;
constexpr uint64_t kMagic = 0x32766b636f737464ull;  // "dtsockv2"

/// What the connector sends: every field fixed-size, integers little-endian (as the hosts).
struct Hello {
  uint64_t magic;
  char group[kGroupBytes];
  uint32_t from, to;  // the connector's and the acceptor's rank in the group
  char nonce[kNonceBytes];
  char proof[kProofBytes];
};
static_assert(sizeof(Hello) == 96);

enum class Role { Connect, Accept };

/// The group's key: HKDF-SHA256 of `secret` with the group's id as salt, for this use only.
std::string group_key(std::string_view secret, std::string_view group);
/// HMAC-SHA256(key, role, group, from, to, nonce): what the connector (Connect) or the
/// acceptor (Accept) shows.
std::string proof(std::string_view key, Role role, std::string_view group, uint32_t from, uint32_t to,
                  std::string_view nonce);
/// A fresh hello from `from` to `to` in `group`.
Hello hello(std::string_view key, std::string_view group, uint32_t from, uint32_t to);

}  // namespace pair_auth

class SocketListener {
 public:
  using Clock = std::chrono::steady_clock;
  /// Connections whose hello has not arrived yet, at most, beyond those the members registered
  /// here still expect (one from each lower rank): a new one beyond drops the oldest.
  static constexpr size_t kMostPending = 128;
  /// How long a connection may take to say its hello.
  static constexpr auto kHelloBound = std::chrono::seconds(5);

  /// The process's listener on `address`'s host (port ignored): made by the first group bound
  /// there, closed with the last. BackendError when it cannot listen.
  static std::shared_ptr<SocketListener> on(const sockaddr_storage& address);
  ~SocketListener();
  SocketListener(const SocketListener&) = delete;
  SocketListener& operator=(const SocketListener&) = delete;

  /// Where peers connect (the port chosen by the kernel).
  const sockaddr_storage& address() const { return address_; }
  socklen_t address_length() const;

  /// Lets in connections to `rank` of `group` that prove `key`.
  void join(const std::string& group, int rank, const std::string& key);
  /// Closes what `rank` of `group` has not taken, and lets no more in.
  void leave(const std::string& group, int rank);

  /// Appends the descriptors to poll for connections and hellos (read them back with serve()).
  void watch(std::vector<pollfd>& fds);
  /// Accepts and reads what `fds` (from watch(), after poll) found ready; drops strangers.
  void serve(const pollfd* fds, size_t n);
  /// The connections to `rank` of `group` that proved themselves since the last call: (peer,
  /// descriptor), the acceptor's answer already written.
  std::vector<std::pair<int, int>> take(const std::string& group, int rank);
  /// Connections let in so far, to any group: while it stays the same, take() has nothing new
  /// for anyone (a wait looks at it, not at take(), each time round).
  uint64_t let_in() const { return let_in_.load(std::memory_order_acquire); }

 private:
  explicit SocketListener(const sockaddr_storage& address);
  struct Pending {
    int fd;
    Clock::time_point until;
    pair_auth::Hello hello;
    size_t got = 0;
  };
  struct Member {
    std::string key;
    std::set<uint32_t> seen;  // lower ranks let in so far: each once
    std::vector<std::pair<int, int>> ready;
  };
  void accept_all();
  // The connections the registered members still expect: one from each lower rank not seen.
  size_t members_still_to_connect() const;
  // Reads `p`'s hello; true when it is done with (let in or dropped).
  bool read_hello(Pending& p);

  std::mutex mu_;
  int fd_ = -1;
  sockaddr_storage address_{};
  std::vector<Pending> pending_;
  std::map<std::pair<std::string, int>, Member> members_;
  std::atomic<uint64_t> let_in_{0};
};

}  // namespace distrun
