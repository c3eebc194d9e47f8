#include "distrun/store/auth.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "distrun/core/error.hpp"

namespace distrun::auth {

namespace {

[[noreturn]] void mac_failed() { throw StoreError("store: HMAC-SHA256 failed (OpenSSL)"); }

// HMAC with SHA-256 chosen and no key yet, made once and copied for each key: fetching the
// algorithms by name takes OpenSSL's global lock and searches its providers.
const EVP_MAC_CTX* hmac_sha256() {
  static EVP_MAC_CTX* const ctx = [] {
    EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    EVP_MAC_CTX* c = mac ? EVP_MAC_CTX_new(mac) : nullptr;
    EVP_MAC_free(mac);  // the context keeps its own reference
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                                 OSSL_PARAM_construct_end()};
    if (c && EVP_MAC_CTX_set_params(c, params) != 1) {
      EVP_MAC_CTX_free(c);
      c = nullptr;
    }
    return c;
  }();
  if (!ctx) mac_failed();
  return ctx;
}

}  // namespace

void Mac::Free::operator()(void* ctx) const { EVP_MAC_CTX_free(static_cast<EVP_MAC_CTX*>(ctx)); }

Mac::Mac(std::string_view key) : ctx_(EVP_MAC_CTX_dup(hmac_sha256())) {
  // An empty key is still a key (HMAC pads it); OpenSSL wants a pointer that is not null.
  static const unsigned char none = 0;
  const auto* k = key.empty() ? &none : reinterpret_cast<const unsigned char*>(key.data());
  if (!ctx_ || EVP_MAC_init(static_cast<EVP_MAC_CTX*>(ctx_.get()), k, key.size(), nullptr) != 1) mac_failed();
}

Mac::Mac(const Mac& other) {
  if (!other.ctx_) return;
  ctx_.reset(EVP_MAC_CTX_dup(static_cast<EVP_MAC_CTX*>(other.ctx_.get())));
  if (!ctx_) mac_failed();
}

Mac& Mac::operator=(const Mac& other) {
  if (this != &other) *this = Mac(other);
  return *this;
}

std::string Mac::operator()(std::initializer_list<std::string_view> parts) {
  auto* ctx = static_cast<EVP_MAC_CTX*>(ctx_.get());
  // A null key starts a new message under the key already set (its pads kept).
  if (!ctx || EVP_MAC_init(ctx, nullptr, 0, nullptr) != 1) mac_failed();
  for (auto part : parts)
    if (EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(part.data()), part.size()) != 1) mac_failed();
  std::string out(kTagBytes, '\0');
  size_t len = 0;
  if (EVP_MAC_final(ctx, reinterpret_cast<unsigned char*>(out.data()), &len, out.size()) != 1 || len != kTagBytes)
    mac_failed();
  return out;
}

std::string hmac(std::string_view key, std::string_view msg) { return Mac(key)({msg}); }

namespace {

std::string labelled(const char* label, std::string_view server_nonce, std::string_view client_nonce) {
  std::string msg = label;
  msg.push_back('\0');
  msg.append(server_nonce);
  msg.append(client_nonce);
  return msg;
}

}  // namespace

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), int(n)) != 1)
    throw StoreError("store: the system's random number generator failed (OpenSSL RAND_bytes)");
  return out;
}

std::string proof(std::string_view secret, Side side, std::string_view server_nonce, std::string_view client_nonce) {
  return hmac(secret, labelled(side == Side::Client ? "distrun-store-v1 client" : "distrun-store-v1 server",
                               server_nonce, client_nonce));
}

std::string session_key(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce) {
  return hmac(secret, labelled("distrun-store-v1 session", server_nonce, client_nonce));
}

std::string hkdf(std::string_view ikm, std::string_view salt, std::string_view info, size_t n) {
  if (n > 255 * 32) throw StoreError("hkdf: output too long");
  const std::string prk = hmac(salt.empty() ? std::string(32, '\0') : std::string(salt), ikm);
  std::string out, block;
  for (unsigned char i = 1; out.size() < n; ++i) {
    block = hmac(prk, block + std::string(info) + char(i));
    out += block;
  }
  out.resize(n);
  return out;
}

bool equal_in_constant_time(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string FrameSeal::tag(Side from, uint64_t seq, std::string_view payload) {
  char head[9] = {from == Side::Client ? 'c' : 's'};
  for (int i = 0; i < 8; ++i) head[1 + i] = char((seq >> (8 * i)) & 0xff);
  return mac_({std::string_view(head, sizeof head), payload});
}

std::string FrameSeal::seal(std::string payload) {
  if (!active()) return payload;
  payload += tag(sender_, sent_++, payload);
  return payload;
}

std::string_view FrameSeal::open(std::string_view sealed) {
  if (!active()) return sealed;
  if (sealed.size() < kTagBytes) throw StoreError("store: a frame without its authentication tag");
  const std::string_view payload = sealed.substr(0, sealed.size() - kTagBytes);
  const Side from = sender_ == Side::Client ? Side::Server : Side::Client;
  if (!equal_in_constant_time(sealed.substr(payload.size()), tag(from, received_, payload)))
    throw StoreError("store: a frame failed authentication (altered, replayed or out of order)");
  ++received_;
  return payload;
}

double estimated_entropy_bits(std::string_view s) {
  if (s.empty()) return 0;
  // The shortest period p that repeats at least twice (s[i] == s[i - p] for every i >= p, and
  // p <= half the length: a longer "period" is only a chance match of the ends).
  size_t period = 1;
  while (period <= s.size() / 2 && !std::equal(s.begin() + long(period), s.end(), s.begin())) ++period;
  if (period > s.size() / 2) period = s.size();
  const std::set<char> distinct(s.begin(), s.end());
  const auto any = [&](auto pred) {
    return std::any_of(s.begin(), s.end(), [&](char c) { return pred((unsigned char)c); });
  };
  const auto all = [&](auto pred) {
    return std::all_of(s.begin(), s.end(), [&](char c) { return pred((unsigned char)c); });
  };
  const bool hex = all([](int c) { return std::isdigit(c) || (c >= 'a' && c <= 'f'); }) ||
                   all([](int c) { return std::isdigit(c) || (c >= 'A' && c <= 'F'); });
  double alphabet = 0;
  if (any([](int c) { return std::isdigit(c); })) alphabet += 10;
  if (any([](int c) { return std::islower(c); })) alphabet += 26;
  if (any([](int c) { return std::isupper(c); })) alphabet += 26;
  if (any([](int c) { return !std::isalnum(c); })) alphabet += 33;
  if (hex && alphabet > 16) alphabet = 16;
  const size_t length = std::min({s.size(), period, 4 * distinct.size()});
  return double(length) * std::log2(alphabet);
}

}  // namespace distrun::auth
