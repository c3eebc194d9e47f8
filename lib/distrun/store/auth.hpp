// Proving the job secret without sending it, then authenticating every frame. A
// challenge-response over HMAC-SHA256 (OpenSSL's libcrypto): the client sends a fresh nonce
// (Hello), the server answers with its own; the client proves HMAC(secret, "client" | server
// nonce | client nonce), and the server answers with the "server" proof, so a client also
// knows it talks to its own job's store before it writes anything there. From then on every
// frame, both ways, carries a tag under a key of this session only (derived from the secret
// and both nonces) over its direction and its sequence number: a frame altered, replayed,
// dropped, reordered or moved to another connection is refused. A recorded exchange is useless
// later: every session has new nonces. (Frames are authenticated, not encrypted: keys and
// values are readable on the wire, and nothing secret is ever put in them.)
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

namespace distrun::auth {

/// Bytes of each nonce, of each proof and of each frame's tag (SHA-256).
constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;
constexpr size_t kTagBytes = 32;

/// `n` bytes from OpenSSL's CSPRNG; StoreError when it cannot give them.
std::string random_bytes(size_t n);

/// HMAC-SHA256 of `msg` under `key`; StoreError when OpenSSL fails.
std::string hmac(std::string_view key, std::string_view msg);

/// HMAC-SHA256 under one key, its key schedule computed once: each message then costs its own
/// hashing only (a store server seals and opens a few frames per connection, for thousands of
/// connections). Not for use by two threads at once.
class Mac {
 public:
  Mac() = default;
  /// StoreError when OpenSSL fails.
  explicit Mac(std::string_view key);
  Mac(const Mac& other);
  Mac& operator=(const Mac& other);
  Mac(Mac&&) = default;
  Mac& operator=(Mac&&) = default;
  ~Mac() = default;
  bool keyed() const { return ctx_ != nullptr; }
  /// The HMAC of the concatenation of `parts`.
  std::string operator()(std::initializer_list<std::string_view> parts);

 private:
  struct Free {
    void operator()(void* ctx) const;
  };
  std::unique_ptr<void, Free> ctx_;  // an EVP_MAC_CTX holding the key
};

enum class Side { Client, Server };

/// What `side` must show: HMAC-SHA256 keyed by `secret` over a label for the side, the server's
/// nonce and the client's nonce.
std::string proof(std::string_view secret, Side side, std::string_view server_nonce, std::string_view client_nonce);

/// The key that authenticates the frames of one session: HMAC-SHA256 keyed by `secret` over a
/// label of its own and both nonces (so it is neither proof, and differs per connection).
std::string session_key(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce);

/// HKDF-SHA256 (RFC 5869) of the input key `ikm`, `salt` and `info`: `n` bytes (n <= 8160).
std::string hkdf(std::string_view ikm, std::string_view salt, std::string_view info, size_t n);

/// Equality whose time depends only on the lengths (CRYPTO_memcmp): no prefix leaks.
bool equal_in_constant_time(std::string_view a, std::string_view b);

/// Seals and opens the frames of one authenticated session. `sender` is the side that seals
/// with this object; the other side opens them. Each direction counts its frames from 0, and
/// the count is in the tag (not on the wire): TCP keeps the order, so any gap is an attack or
/// a bug. Inactive (no key: a store without secret) it passes frames unchanged.
class FrameSeal {
 public:
  FrameSeal() = default;
  FrameSeal(std::string_view key, Side sender) : mac_(key), sender_(sender) {}

  bool active() const { return mac_.keyed(); }
  /// `payload` followed by its tag.
  std::string seal(std::string payload);
  /// The payload of a sealed frame from the other side; StoreError when its tag is missing or
  /// wrong (altered, replayed, reordered, from another session).
  std::string_view open(std::string_view sealed);

 private:
  std::string tag(Side from, uint64_t seq, std::string_view payload);

  Mac mac_;
  Side sender_ = Side::Client;
  uint64_t sent_ = 0, received_ = 0;
};

/// An estimate of the entropy of a secret typed or generated as text, in bits: the length of
/// its shortest repeating period (and at most four per distinct character) times log2 of the
/// alphabet its characters come from (hex 16, else the sum of the classes it uses: digits 10,
/// lower and upper case letters 26 each, the rest 33), as a brute-force guesser would count.
/// Random strings pass (`openssl rand -hex 16` gives 128); short ones, repeated patterns and
/// a few words do not (it knows no dictionary: a long passphrase of words may pass).
double estimated_entropy_bits(std::string_view secret);

}  // namespace distrun::auth
