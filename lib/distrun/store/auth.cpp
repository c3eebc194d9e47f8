#include "distrun/store/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "distrun/core/error.hpp"

namespace distrun::auth {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), int(n)) != 1)
    throw StoreError("store: the system's random number generator failed (OpenSSL RAND_bytes)");
  return out;
}

std::string proof(std::string_view secret, Side side, std::string_view server_nonce, std::string_view client_nonce) {
  std::string msg = side == Side::Client ? "distrun-store-v1 client" : "distrun-store-v1 server";
  msg.push_back('\0');
  msg.append(server_nonce);
  msg.append(client_nonce);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), secret.data(), int(secret.size()), reinterpret_cast<const unsigned char*>(msg.data()),
            msg.size(), md, &len))
    throw StoreError("store: HMAC-SHA256 failed (OpenSSL)");
  return std::string(reinterpret_cast<const char*>(md), len);
}

bool equal_in_constant_time(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace distrun::auth
