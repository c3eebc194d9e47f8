// Proving the job secret without sending it: a challenge-response over HMAC-SHA256 (OpenSSL's
// libcrypto). The client sends a fresh nonce (Hello), the server answers with its own; the
// client proves HMAC(secret, "client" | server nonce | client nonce), and the server answers
// with the "server" proof, so a client also knows it talks to its own job's store before it
// writes anything there. A recorded exchange is useless later: every session has new nonces.
#pragma once
#include <string>
#include <string_view>

namespace distrun::auth {

/// Bytes of each nonce, and of each proof (SHA-256).
constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;

/// `n` bytes from OpenSSL's CSPRNG; StoreError when it cannot give them.
std::string random_bytes(size_t n);

enum class Side { Client, Server };

/// What `side` must show: HMAC-SHA256 keyed by `secret` over a label for the side, the server's
/// nonce and the client's nonce.
std::string proof(std::string_view secret, Side side, std::string_view server_nonce, std::string_view client_nonce);

/// Equality whose time depends only on the lengths (CRYPTO_memcmp): no prefix leaks.
bool equal_in_constant_time(std::string_view a, std::string_view b);

}  // namespace distrun::auth
