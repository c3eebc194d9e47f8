// libFuzzer target: the store server's session state machine (ServerSession), not only its
// frame decoding. The input is a script of frames for two sessions sharing one server's keys:
//   [session byte][u16 length][payload]...
// A payload starting with 0xAA is replaced by the right Auth proof for that session's current
// challenge (what a client holding the secret sends), so the fuzzer also explores the states
// after authentication. Once a session is open the harness seals each payload as a client
// does (auth::FrameSeal), unless it starts with 0xBB: then the rest goes unsealed, a forgery.
// Checked, whatever the input:
//   - before a session is open, no key changes and no reply carries a stored value;
//   - an unsealed frame to an open session changes no key and closes it;
//   - a closed session stays closed (the harness stops feeding it), frames over the session's
//     limit close it, and nothing crashes, hangs or leaks.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "distrun/store/auth.hpp"
#include "distrun/store/protocol.hpp"
#include "distrun/store/server_session.hpp"

using namespace distrun;

namespace {

const std::string kSecret = "fuzz-secret";
const std::string kPlan = "PLAN-VALUE-port-and-secret";

struct Client {
  std::unique_ptr<ServerSession> session;
  std::string challenge, client_nonce;
  auth::FrameSeal seal;
  bool closed = false;
  bool parked = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  StoreData store;
  store.kv["plan"] = kPlan;
  int counter = 0;
  auto nonce = [&](size_t n) { return std::string(n, char('a' + (counter++ % 26))); };
  Client clients[2];
  for (auto& c : clients) c.session = std::make_unique<ServerSession>(store, kSecret, nonce);

  size_t at = 0;
  while (at + 3 <= size) {
    Client& c = clients[data[at] & 1];
    const size_t len = size_t(data[at + 1]) | size_t(data[at + 2]) << 8;
    at += 3;
    if (len > size - at) break;
    std::string payload(reinterpret_cast<const char*>(data + at), len);
    at += len;
    if (c.closed || c.parked) continue;
    if (payload.size() == 1 && uint8_t(payload[0]) == 0xAA && !c.challenge.empty()) {
      wire::Request r;
      r.cmd = wire::Cmd::Auth;
      r.keys = {auth::proof(kSecret, auth::Side::Client, c.challenge, c.client_nonce)};
      payload = wire::encode(r);
    }
    const bool was_open = c.session->open();
    const bool forged = was_open && !payload.empty() && uint8_t(payload[0]) == 0xBB;
    if (forged)
      payload.erase(0, 1);
    else if (was_open)
      payload = c.seal.seal(payload);
    if (payload.size() > c.session->frame_limit(1u << 16)) {  // the shell closes it unread
      c.closed = true;
      continue;
    }
    const auto before = store.kv;
    SessionAction a = c.session->on_frame(payload);
    if (forged && (store.kv != before || a.kind != SessionAction::Close)) std::abort();
    if (!was_open && c.session->open())
      c.seal = auth::FrameSeal(auth::session_key(kSecret, c.challenge, c.client_nonce), auth::Side::Client);
    if (!was_open) {
      if (store.kv != before) std::abort();                       // a stranger changed a key
      if (a.body.find(kPlan) != std::string::npos) std::abort();  // ...or read one
      if (a.kind == SessionAction::Reply && c.session->phase() == ServerSession::Phase::Challenged &&
          c.challenge.empty()) {
        c.challenge = a.body;
        wire::Request r = wire::decode_request(payload);
        c.client_nonce = r.keys.at(0);
      }
    }
    switch (a.kind) {
      case SessionAction::Close:
      case SessionAction::ReplyThenClose: c.closed = true; break;
      case SessionAction::Park: c.parked = true; break;
      case SessionAction::Reply: break;
    }
    if (a.wrote())
      for (auto& other : clients)
        if (other.parked && other.session->try_finish()) other.parked = false;
  }
  for (auto& c : clients)
    if (c.parked) (void)c.session->on_park_timeout();
  return 0;
}
