// What one connection to the store server may do, and what the server answers: the protocol's
// state machine without sockets (tcp_store_server.cpp is its asio shell), so that it can be
// unit-tested and fuzzed as it runs.
//
//   Fresh --Hello--> Challenged --Auth(valid proof)--> Open      (a job secret is set)
//   Open from the start                                           (no secret)
//
// Before Open only Hello, then Auth, are accepted, each in one small frame; anything else, a
// second Hello or a wrong proof closes the connection, so no key is read or written by a peer
// that has not proved the secret. Once Open with a secret, every frame must carry its tag
// under the session's key (auth::FrameSeal), and every reply carries one: a frame that fails
// closes the connection, so a peer that saw the handshake still cannot act in the session.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "distrun/store/auth.hpp"
#include "distrun/store/protocol.hpp"

namespace distrun {

/// The keys of one server, shared by its sessions (all on the server's one thread).
struct StoreData {
  // Hashed: node 0 looks up thousands of keys at each watch (every agent's claim).
  std::unordered_map<std::string, std::string> kv;
  // A claimed key's session, and the count to add one to when it goes (see Cmd::Claim).
  struct Claim {
    const void* by = nullptr;
    std::string count;
  };
  std::unordered_map<std::string, Claim> claimed_by;
  bool has(const std::string& key) const { return kv.count(key) > 0; }
  /// Adds `delta` to the count under `key` (0 when absent): its new value, or StoreError when
  /// the key holds no count or it would overflow.
  int64_t add(const std::string& key, int64_t delta);
};

/// What the shell does after a frame.
struct SessionAction {
  enum Kind {
    Reply,           // send `status` + `body`, then read the next frame
    ReplyThenClose,  // send it, then close (a refused proof: the client learns why)
    Park,            // a get/wait(-any) not satisfied yet: wait up to `park_for`, see try_finish()
    Quiet,           // no reply (a heartbeat): read the next frame
    Close,           // close at once; `why` says why (for the log)
  };
  Kind kind = Reply;
  wire::Status status = wire::Status::Ok;
  std::string body;
  std::string why;
  std::vector<std::string> written;  // keys written: the sessions parked on them may now finish
  bool wrote() const { return !written.empty(); }
  std::chrono::milliseconds park_for{0};
};

class ServerSession {
 public:
  enum class Phase { Fresh, Challenged, Open };
  using NonceSource = std::function<std::string(size_t)>;

  /// A session of a server holding `data`; `secret` empty means no authentication. `nonce`
  /// gives the server's challenge bytes (default: OpenSSL's CSPRNG; the fuzzer passes its own).
  ServerSession(StoreData& data, std::string secret, NonceSource nonce = {});

  Phase phase() const { return phase_; }
  bool open() const { return phase_ == Phase::Open; }
  /// The largest frame worth reading now: small until the peer proved the secret.
  uint32_t frame_limit(uint32_t max_frame) const;

  /// Decodes and handles one frame's payload.
  SessionAction on_frame(std::string_view payload);
  /// The payload of the reply `a` (status, body), sealed when the frame it answers was.
  std::string reply_payload(const SessionAction& a);
  /// For a parked get/wait/wait-any: its reply once it is satisfied, else nullopt.
  std::optional<SessionAction> try_finish() const;
  /// For a parked get/wait/wait-any: the keys whose write may finish it (a get/wait: the
  /// next key still missing; a wait-any: each of its keys once), or none when it is
  /// satisfied. A wait's keys are looked at from where the last look stopped, so N keys
  /// written one by one cost O(N) in all, not O(N^2); a key removed meanwhile is found by the
  /// full look before the wait finishes.
  std::vector<std::string> park_keys();
  /// For a parked get/wait/wait-any whose time ran out.
  SessionAction on_park_timeout() const;
  /// The connection closed: the keys this session claimed, and still holds, are removed; the
  /// counts that grew with them (for the shell to wake their waiters).
  std::vector<std::string> on_close();

 private:
  SessionAction handle_unauthenticated(const wire::Request& r);
  SessionAction handle(wire::Request r);

  StoreData& data_;
  std::string secret_;
  NonceSource nonce_;
  Phase phase_;
  std::string server_nonce_;
  auth::FrameSeal seal_;
  bool answer_sealed_ = false;  // the frame being answered was sealed: so is the reply
  wire::Request parked_;
  std::vector<std::string> claims_;  // the keys this session claimed (some taken over since)
  size_t scan_ = 0;                  // a parked wait's keys before this were there when last looked at
};

}  // namespace distrun
