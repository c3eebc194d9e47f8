#include "distrun/store/protocol.hpp"

#include <algorithm>
#include <cstring>

#include "distrun/core/error.hpp"

namespace distrun::wire {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void put_i64(std::string& out, int64_t v) {
  auto u = uint64_t(v);
  for (int i = 0; i < 8; ++i) out.push_back(char((u >> (8 * i)) & 0xff));
}
void put_str(std::string& out, std::string_view s) {
  put_u32(out, uint32_t(s.size()));
  out.append(s.data(), s.size());
}

int64_t clamp_timeout_ms(int64_t ms) { return ms < 0 ? 0 : ms > kMaxTimeoutMs ? kMaxTimeoutMs : ms; }

uint32_t read_u32(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  return uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
}

std::string frame(const std::string& payload) {
  std::string out;
  out.reserve(payload.size() + 4);
  put_u32(out, uint32_t(payload.size()));
  out += payload;
  return out;
}

std::string encode(const Request& r) {
  std::string out;
  out.push_back(char(r.cmd));
  switch (r.cmd) {
    case Cmd::Auth:
    case Cmd::Hello:
    case Cmd::Remove:
    case Cmd::Beat: put_str(out, r.keys.at(0)); break;
    case Cmd::Set:
    case Cmd::Claim:
      put_str(out, r.keys.at(0));
      put_str(out, r.value);
      if (r.cmd == Cmd::Claim && r.keys.size() > 1) put_str(out, r.keys[1]);
      break;
    case Cmd::Get:
    case Cmd::Add:
      put_str(out, r.keys.at(0));
      put_i64(out, r.number);
      if (r.cmd == Cmd::Add && r.keys.size() > 1) {
        put_str(out, r.keys[1]);
        put_str(out, r.value);
      }
      break;
    case Cmd::Wait:
    case Cmd::WaitAny:
    case Cmd::Check:
    case Cmd::MultiGet:
      put_i64(out, r.number);
      put_u32(out, uint32_t(r.keys.size()));
      for (const auto& k : r.keys) put_str(out, k);
      break;
    case Cmd::Ping: break;
  }
  return out;
}

namespace {
struct Reader {
  std::string_view in;
  size_t at = 0;
  void need(size_t n) {
    if (in.size() - at < n) throw StoreError("store protocol: truncated frame");
  }
  uint32_t u32() {
    need(4);
    uint32_t v = read_u32(in.data() + at);
    at += 4;
    return v;
  }
  int64_t i64() {
    need(8);
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | uint8_t(in[at + size_t(i)]);
    at += 8;
    return int64_t(v);
  }
  std::string str(uint32_t bound) {
    uint32_t n = u32();
    if (n > bound) throw StoreError("store protocol: field of " + std::to_string(n) + " bytes over the bound");
    need(n);
    std::string s(in.substr(at, n));
    at += n;
    return s;
  }
};
}  // namespace

Request decode_request(std::string_view payload) {
  Reader r{payload};
  r.need(1);
  Request q;
  uint8_t c = uint8_t(payload[0]);
  r.at = 1;
  if (c < uint8_t(Cmd::Auth) || c > uint8_t(Cmd::Beat))
    throw StoreError("store protocol: unknown command " + std::to_string(c));
  q.cmd = Cmd(c);
  switch (q.cmd) {
    case Cmd::Auth:
    case Cmd::Hello:
    case Cmd::Remove:
    case Cmd::Beat: q.keys.push_back(r.str(kMaxKey)); break;
    case Cmd::Set:
    case Cmd::Claim:
      q.keys.push_back(r.str(kMaxKey));
      q.value = r.str(UINT32_MAX);
      if (q.cmd == Cmd::Claim && r.at < payload.size()) q.keys.push_back(r.str(kMaxKey));
      break;
    case Cmd::Get:
    case Cmd::Add:
      q.keys.push_back(r.str(kMaxKey));
      q.number = r.i64();
      if (q.cmd == Cmd::Add && r.at < payload.size()) {
        q.keys.push_back(r.str(kMaxKey));
        q.value = r.str(UINT32_MAX);
      }
      break;
    case Cmd::Wait:
    case Cmd::WaitAny:
    case Cmd::Check:
    case Cmd::MultiGet: {
      q.number = r.i64();
      uint32_t n = r.u32();
      if (n > kMaxKeys) throw StoreError("store protocol: too many keys");
      for (uint32_t i = 0; i < n; ++i) q.keys.push_back(r.str(kMaxKey));
      break;
    }
    case Cmd::Ping: break;
  }
  if (r.at != payload.size()) throw StoreError("store protocol: trailing bytes in frame");
  return q;
}

std::string encode_values(const std::vector<const std::string*>& values) {
  std::string out;
  for (const auto* v : values) {
    out.push_back(char(v != nullptr));
    if (v) put_str(out, *v);
  }
  return out;
}

std::vector<std::optional<std::string>> decode_values(std::string_view body, size_t count) {
  Reader r{body};
  std::vector<std::optional<std::string>> values;
  values.reserve(std::min<size_t>(count, kMaxKeys));
  for (size_t i = 0; i < count; ++i) {
    r.need(1);
    const uint8_t present = uint8_t(body[r.at++]);
    if (present > 1) throw StoreError("store protocol: malformed multi-get reply");
    values.push_back(present ? std::optional<std::string>(r.str(UINT32_MAX)) : std::nullopt);
  }
  if (r.at != body.size()) throw StoreError("store protocol: trailing bytes in multi-get reply");
  return values;
}

}  // namespace distrun::wire
