// The TCPStore wire format. A frame is a little-endian u32 payload length, then the payload:
// one command byte and its fields (strings as u32 length + bytes, integers as little-endian
// i64). Replies are frames too: a status byte, then the result. Decoding is bounded and
// total: any byte string either decodes or throws StoreError, which the fuzzer checks.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distrun::wire {

// Hello (client nonce) asks for the server's challenge; Auth answers it with a proof (auth.hpp).
// Claim sets a key that lives as long as the connection that set it (the server removes it
// when that connection closes), so a peer's death is seen at once, not after a timeout.
// A claim may name a count (a second key) that the server adds one to when it removes the
// claimed key, so that one read tells whether any claim was lost since the last.
// Add may name a mark (a second key, and a value) that it sets in the same step: a rank joins
// a barrier by marking itself and counting itself in with one request.
// WaitAny finishes at the first of its keys written (its reply: that key's index, a u32).
// Beat adds one to the count under its key and has no reply: a heartbeat, which a request of
// the same connection parked meanwhile stays parked through (any other frame ends that park).
// MultiGet reads many keys in one round trip without waiting (its reply: per key, a presence
// byte, then the value as a string when present).
enum class Cmd : uint8_t { Auth = 1, Set, Get, Add, Wait, Check, Remove, Ping, Hello, Claim, WaitAny, MultiGet, Beat };
enum class Status : uint8_t { Ok = 0, Timeout = 1, Error = 2 };

/// Frames larger than this are refused (the connection is closed with a log line).
constexpr uint32_t kDefaultMaxFrame = 256u << 20;
/// Keys longer than this are refused.
constexpr uint32_t kMaxKey = 64u << 10;
/// Most keys in one wait/check/multi-get.
constexpr uint32_t kMaxKeys = 1u << 16;
/// Frames before authentication: only Hello and Auth (a nonce or a proof) fit, so a stranger
/// cannot make the server reserve memory.
constexpr uint32_t kMaxUnauthenticatedFrame = 128;
/// A reply larger than this is a broken or hostile server: the client refuses to allocate it.
constexpr uint32_t kMaxReply = kDefaultMaxFrame + 64;
/// The longest wait a request may ask for (7 days): larger values are clamped, so that no
/// deadline arithmetic can overflow.
constexpr int64_t kMaxTimeoutMs = 7LL * 24 * 3600 * 1000;

/// `ms` clamped to [0, kMaxTimeoutMs].
int64_t clamp_timeout_ms(int64_t ms);

struct Request {
  Cmd cmd = Cmd::Ping;
  std::vector<std::string> keys;  // Set/Get/Remove/Beat: one; Claim: one, and its count or none;
                                  // Add: one, and its mark or none;
                                  // Wait/WaitAny/Check/MultiGet: many; Hello: nonce; Auth: proof
  std::string value;              // Set/Claim; Add: its mark's
  int64_t number = 0;             // Add: delta; Get/Wait/WaitAny: timeout in ms
};

/// Encodes `r` as a payload (without the length prefix).
std::string encode(const Request& r);
/// Decodes a payload; throws StoreError on anything malformed or over the bounds.
Request decode_request(std::string_view payload);

/// Appends a u32 length prefix to `payload`.
std::string frame(const std::string& payload);
/// Reads the little-endian u32 of a frame header.
uint32_t read_u32(const void* p);

/// MultiGet's reply body: per key, a presence byte, then the value when present (nullptr: absent).
std::string encode_values(const std::vector<const std::string*>& values);
/// Decodes MultiGet's reply body for `count` keys; StoreError on anything malformed.
std::vector<std::optional<std::string>> decode_values(std::string_view body, size_t count);

/// Helpers shared by encoder and decoder.
void put_u32(std::string& out, uint32_t v);
void put_i64(std::string& out, int64_t v);
void put_str(std::string& out, std::string_view s);

}  // namespace distrun::wire
