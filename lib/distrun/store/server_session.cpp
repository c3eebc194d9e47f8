#include "distrun/store/server_session.hpp"

#include <algorithm>

#include "distrun/core/error.hpp"
#include "distrun/store/auth.hpp"
#include "distrun/store/hash_store.hpp"

namespace distrun {

namespace {

SessionAction reply(wire::Status st, std::string body = {}) {
  SessionAction a;
  a.status = st;
  a.body = std::move(body);
  return a;
}

SessionAction close_because(std::string why) {
  SessionAction a;
  a.kind = SessionAction::Close;
  a.why = std::move(why);
  return a;
}

}  // namespace

int64_t StoreData::add(const std::string& key, int64_t delta) {
  auto it = kv.find(key);
  const int64_t v = checked_add(key, it == kv.end() ? 0 : parse_counter(key, it->second), delta);
  kv[key] = std::to_string(v);
  return v;
}

ServerSession::ServerSession(StoreData& data, std::string secret, NonceSource nonce)
    : data_(data), secret_(std::move(secret)), nonce_(std::move(nonce)),
      phase_(secret_.empty() ? Phase::Open : Phase::Fresh) {
  if (!nonce_) nonce_ = auth::random_bytes;
}

uint32_t ServerSession::frame_limit(uint32_t max_frame) const {
  if (!open()) return std::min(max_frame, wire::kMaxUnauthenticatedFrame);
  return seal_.active() ? std::max(max_frame, max_frame + uint32_t(auth::kTagBytes)) : max_frame;
}

SessionAction ServerSession::on_frame(std::string_view payload) {
  wire::Request r;
  answer_sealed_ = seal_.active();
  try {
    payload = seal_.open(payload);
    r = wire::decode_request(payload);
  } catch (const StoreError& e) {
    return close_because(e.what());
  }
  if (!open()) return handle_unauthenticated(r);
  return handle(std::move(r));
}

SessionAction ServerSession::handle_unauthenticated(const wire::Request& r) {
  if (phase_ == Phase::Fresh && r.cmd == wire::Cmd::Hello) {
    if (r.keys[0].size() != auth::kNonceBytes) return close_because("malformed challenge request");
    server_nonce_ = nonce_(auth::kNonceBytes) + r.keys[0];  // ours, then theirs
    phase_ = Phase::Challenged;
    return reply(wire::Status::Ok, server_nonce_.substr(0, auth::kNonceBytes));
  }
  if (phase_ == Phase::Challenged && r.cmd == wire::Cmd::Auth) {
    const std::string_view ours(server_nonce_.data(), auth::kNonceBytes);
    const std::string_view theirs(server_nonce_.data() + auth::kNonceBytes, auth::kNonceBytes);
    if (!auth::equal_in_constant_time(r.keys[0], auth::proof(secret_, auth::Side::Client, ours, theirs))) {
      SessionAction a = reply(wire::Status::Error, "wrong job secret");
      a.kind = SessionAction::ReplyThenClose;
      a.why = "missing or wrong job secret (the proof does not match)";
      return a;
    }
    phase_ = Phase::Open;
    seal_ = auth::FrameSeal(auth::session_key(secret_, ours, theirs), auth::Side::Server);
    // Our own proof, so the client knows it talks to its job's store before it writes to it.
    return reply(wire::Status::Ok, auth::proof(secret_, auth::Side::Server, ours, theirs));
  }
  return close_because("missing or wrong job secret (" +
                       std::string(phase_ == Phase::Fresh ? "no challenge asked" : "no proof") + " before command " +
                       std::to_string(int(r.cmd)) + ")");
}

std::string ServerSession::reply_payload(const SessionAction& a) {
  std::string payload(1, char(a.status));
  payload += a.body;
  return answer_sealed_ ? seal_.seal(std::move(payload)) : payload;
}

SessionAction ServerSession::handle(wire::Request r) {
  auto& kv = data_.kv;
  switch (r.cmd) {
    case wire::Cmd::Hello:
      // With no secret there is no challenge: an empty nonce says so (a client that holds a
      // secret then refuses this store: it cannot prove it belongs to the job).
      return reply(wire::Status::Ok);
    case wire::Cmd::Auth:
    case wire::Cmd::Ping: return reply(wire::Status::Ok);
    case wire::Cmd::Set:
    case wire::Cmd::Claim: {
      // A plain set of a claimed key takes it over: it stays after the claimer leaves.
      if (r.cmd == wire::Cmd::Claim) {
        data_.claimed_by[r.keys[0]] = {this, r.keys.size() > 1 ? r.keys[1] : std::string()};
        claims_.push_back(r.keys[0]);
      } else {
        data_.claimed_by.erase(r.keys[0]);
      }
      kv[r.keys[0]] = std::move(r.value);
      auto a = reply(wire::Status::Ok);
      a.written = {std::move(r.keys[0])};
      return a;
    }
    case wire::Cmd::Add: {
      int64_t v;
      try {
        v = data_.add(r.keys[0], r.number);
      } catch (const StoreError& e) {
        return reply(wire::Status::Error, e.what());
      }
      std::string out;
      wire::put_i64(out, v);
      auto a = reply(wire::Status::Ok, out);
      if (r.keys.size() > 1) {  // the mark, set as by a Set
        data_.claimed_by.erase(r.keys[1]);
        kv[r.keys[1]] = std::move(r.value);
      }
      a.written = std::move(r.keys);
      return a;
    }
    case wire::Cmd::Check: {
      bool all = true;
      for (const auto& k : r.keys) all = all && data_.has(k);
      return reply(wire::Status::Ok, std::string(1, char(all)));
    }
    case wire::Cmd::Remove:
      data_.claimed_by.erase(r.keys[0]);
      return reply(wire::Status::Ok, std::string(1, char(kv.erase(r.keys[0]) > 0)));
    case wire::Cmd::MultiGet: {
      // Sized first, so that a reply over the bound is refused before it is built.
      size_t size = 0;
      std::vector<const std::string*> found;
      found.reserve(r.keys.size());
      for (const auto& k : r.keys) {
        auto it = kv.find(k);
        found.push_back(it == kv.end() ? nullptr : &it->second);
        size += 1 + (it == kv.end() ? 0 : 4 + it->second.size());
      }
      if (size >= wire::kDefaultMaxFrame)
        return reply(wire::Status::Error, "a multi-get of " + std::to_string(size) + " bytes is over the bound of " +
                                              std::to_string(wire::kDefaultMaxFrame) + ": ask for fewer keys");
      return reply(wire::Status::Ok, wire::encode_values(found));
    }
    case wire::Cmd::Beat: {
      try {
        data_.add(r.keys[0], 1);
      } catch (const StoreError& e) {
        return close_because(e.what());  // no reply to say it in
      }
      SessionAction a;
      a.kind = SessionAction::Quiet;
      a.written = {std::move(r.keys[0])};
      return a;
    }
    case wire::Cmd::Get:
    case wire::Cmd::Wait:
    case wire::Cmd::WaitAny: {
      r.number = wire::clamp_timeout_ms(r.number);
      parked_ = std::move(r);
      scan_ = 0;
      if (auto done = try_finish()) return *done;
      SessionAction a;
      a.kind = SessionAction::Park;
      a.park_for = std::chrono::milliseconds(parked_.number);
      return a;
    }
  }
  return close_because("unknown command");
}

std::vector<std::string> ServerSession::on_close() {
  std::vector<std::string> counted;
  for (const auto& key : claims_) {
    auto it = data_.claimed_by.find(key);
    if (it == data_.claimed_by.end() || it->second.by != this) continue;  // taken over, or removed
    data_.kv.erase(key);
    if (!it->second.count.empty()) try {
        data_.add(it->second.count, 1);
        counted.push_back(it->second.count);
      } catch (const StoreError&) {
        // Not a count any more (overwritten): nobody reads it as one.
      }
    data_.claimed_by.erase(it);
  }
  claims_.clear();
  return counted;
}

std::vector<std::string> ServerSession::park_keys() {
  const auto& keys = parked_.keys;
  if (parked_.cmd == wire::Cmd::WaitAny) {
    if (std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.has(k); })) return {};
    std::vector<std::string> distinct = keys;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    return distinct;
  }
  for (; scan_ < keys.size(); ++scan_)
    if (!data_.has(keys[scan_])) return {keys[scan_]};
  for (scan_ = 0; scan_ < keys.size(); ++scan_)
    if (!data_.has(keys[scan_])) return {keys[scan_]};
  return {};
}

std::optional<SessionAction> ServerSession::try_finish() const {
  if (parked_.cmd == wire::Cmd::WaitAny) {
    for (size_t i = 0; i < parked_.keys.size(); ++i)
      if (data_.has(parked_.keys[i])) {
        std::string index;
        wire::put_u32(index, uint32_t(i));
        return reply(wire::Status::Ok, index);
      }
    return std::nullopt;
  }
  for (const auto& k : parked_.keys)
    if (!data_.has(k)) return std::nullopt;
  if (parked_.cmd == wire::Cmd::Get) return reply(wire::Status::Ok, data_.kv.at(parked_.keys[0]));
  return reply(wire::Status::Ok);
}

SessionAction ServerSession::on_park_timeout() const {
  if (parked_.cmd == wire::Cmd::WaitAny)
    return reply(wire::Status::Timeout, "timed out after " + std::to_string(parked_.number) +
                                            " ms waiting for any of key(s) " +
                                            missing_keys(parked_.keys, [](const std::string&) { return false; }));
  std::string missing = missing_keys(parked_.keys, [&](const std::string& k) { return data_.has(k); });
  return reply(wire::Status::Timeout,
               "timed out after " + std::to_string(parked_.number) + " ms waiting for key(s) " + missing);
}

}  // namespace distrun
