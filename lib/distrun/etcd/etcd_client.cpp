#include "distrun/etcd/etcd_client.hpp"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "distrun/core/error.hpp"

namespace distrun::etcd {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// A member that takes longer than this for one request is asked again, or another is.
constexpr milliseconds kTryTimeout{1500};
constexpr milliseconds kConnectTimeout{500};
constexpr milliseconds kPause{50};  // between passes over every endpoint

size_t append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

int64_t number(const json& obj, const char* field);

// A watch's stream: one JSON message a line; the transfer ends (0 returned) at the first
// event, or when etcd cancels the watch or says something else.
struct WatchStream {
  std::string buffer;
  bool written = false, ended = false;
  int64_t revision = 0;  // of the last event
};

size_t on_watch_data(char* data, size_t size, size_t n, void* out) {
  auto& w = *static_cast<WatchStream*>(out);
  w.buffer.append(data, size * n);
  for (size_t nl; (nl = w.buffer.find('\n')) != std::string::npos;) {
    const json m = json::parse(w.buffer.substr(0, nl), nullptr, false);
    w.buffer.erase(0, nl + 1);
    if (!m.is_object() || !m.contains("result")) {
      w.ended = true;
      continue;
    }
    const json& r = m["result"];
    if (r.contains("events") && r["events"].is_array() && !r["events"].empty()) {
      w.written = true;
      for (const json& e : r["events"]) try {
          if (e.is_object() && e.contains("kv") && e["kv"].is_object())
            w.revision = std::max(w.revision, number(e["kv"], "mod_revision"));
        } catch (const StoreError&) {
          // Not through libcurl: an event without its revision is still an event.
        }
    }
    if (r.value("canceled", false)) w.ended = true;
  }
  return w.written || w.ended ? 0 : size * n;
}

std::string str(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

int64_t number(const json& obj, const char* field) {
  // The gateway writes 64-bit integers as strings and leaves out zeroes.
  if (!obj.contains(field)) return 0;
  const json& v = obj[field];
  try {
    return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
  } catch (const std::exception&) {
    throw StoreError(std::string("etcd: bad number in field ") + field);
  }
}

}  // namespace

Credentials Credentials::from_env() {
  Credentials c;
  for (auto [field, name] :
       {std::pair{&c.ca_cert, "ETCDCTL_CACERT"}, {&c.cert, "ETCDCTL_CERT"}, {&c.key, "ETCDCTL_KEY"}})
    if (const char* v = std::getenv(name)) *field = v;
  const char* user = std::getenv("ETCDCTL_USER");
  if (!user || !*user) return c;
  c.user = user;
  const size_t colon = c.user.find(':');
  if (colon != std::string::npos) {
    c.password = c.user.substr(colon + 1);
    c.user.resize(colon);
  } else if (const char* password = std::getenv("ETCDCTL_PASSWORD")) {
    c.password = password;
  }
  return c;
}

struct Client::Curl {
  CURL* handle = nullptr;
  curl_slist* headers = nullptr;
  Curl() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    handle = curl_easy_init();
    if (!handle) throw StoreError("etcd: cannot start libcurl");
    set_token("");
  }
  // The headers of every request: JSON, and the auth token when there is one.
  void set_token(const std::string& token) {
    curl_slist_free_all(headers);
    headers = curl_slist_append(nullptr, "Content-Type: application/json");
    if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: " + token).c_str());
  }
  ~Curl() {
    curl_slist_free_all(headers);
    curl_easy_cleanup(handle);
  }
  // The CA and the client certificate of every https:// request.
  void set_tls(const Credentials& c) {
    if (!c.ca_cert.empty()) curl_easy_setopt(handle, CURLOPT_CAINFO, c.ca_cert.c_str());
    if (!c.cert.empty()) curl_easy_setopt(handle, CURLOPT_SSLCERT, c.cert.c_str());
    if (!c.key.empty()) curl_easy_setopt(handle, CURLOPT_SSLKEY, c.key.c_str());
  }
  // Sets up a JSON POST of `body` to `url`, its answer to `sink(data)`, bounded by `connect`
  // and `total`; curl_easy_perform() sends it.
  void post(const std::string& url, const std::string& body, curl_write_callback sink, void* data, milliseconds connect,
            milliseconds total) {
    curl_easy_setopt(handle, CURLOPT_URL, url.c_str());
    curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(handle, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE, long(body.size()));
    curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(handle, CURLOPT_WRITEDATA, data);
    curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS, long(connect.count()));
    curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, long(total.count()));
  }
};

Client::Client(std::vector<std::string> endpoints, milliseconds timeout, Credentials credentials)
    : credentials_(std::move(credentials)), endpoints_(std::move(endpoints)), timeout_(timeout),
      curl_(std::make_unique<Curl>()) {
  curl_->set_tls(credentials_);
  for (auto& e : endpoints_) {
    if (e.find("://") == std::string::npos) e = "http://" + e;
    // etcd's client port, as torchrun's etcd backend assumes it.
    if (e.find(':', e.find("://") + 3) == std::string::npos) e += ":2379";
  }
}

Client::~Client() = default;

json Client::call(const std::string& path, const json& body) {
  const std::string request = body.dump();
  if (credentials_.user.empty()) {
    long status = 0;
    return try_call(path, request, status);
  }
  if (!authenticated_) authenticate();
  long status = 0;
  json answer = try_call(path, request, status);
  if (status != 401) return answer;
  authenticate();  // the token expired, or the member that issued it forgot it
  answer = try_call(path, request, status);
  if (status == 401)
    throw StoreError("etcd refused the token of user " + credentials_.user + " just issued for it: " + answer.dump());
  return answer;
}

void Client::authenticate() {
  authenticated_ = false;
  curl_->set_token("");
  long status = 0;
  const json answer = try_call("/v3/auth/authenticate",
                               json{{"name", credentials_.user}, {"password", credentials_.password}}.dump(), status);
  if (status == 401 || !answer.contains("token") || !answer["token"].is_string())
    throw StoreError("etcd gave no token to user " + credentials_.user);
  curl_->set_token(answer["token"].get<std::string>());
  authenticated_ = true;
}

json Client::try_call(const std::string& path, const std::string& request, long& status) {
  const auto deadline = Clock::now() + timeout_;
  std::string last_error;
  for (;;) {
    for (size_t n = 0; n < endpoints_.size(); ++n) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left <= milliseconds(0)) break;
      const std::string& endpoint = endpoints_[current_];
      std::string reply;
      CURL* h = curl_->handle;
      curl_->post(endpoint + path, request, append, &reply, std::min(left, kConnectTimeout),
                  std::min(left, kTryTimeout));
      ++requests_;
      const CURLcode rc = curl_easy_perform(h);
      status = 0;
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
      // A token refused is for call() to renew; the body says why.
      if (rc == CURLE_OK && status == 401 && !credentials_.user.empty()) return json::parse(reply, nullptr, false);
      if (rc == CURLE_OK && status == 200) {
        char* local = nullptr;
        if (curl_easy_getinfo(h, CURLINFO_LOCAL_IP, &local) == CURLE_OK && local) local_address_ = local;
        json answer = json::parse(reply, nullptr, false);
        if (answer.is_discarded() || !answer.is_object())
          throw StoreError("etcd at " + endpoint + ": not JSON: " + reply);
        if (answer.contains("header") && answer["header"].is_object()) revision_ = number(answer["header"], "revision");
        return answer;
      }
      last_error =
          endpoint + ": " + (rc != CURLE_OK ? curl_easy_strerror(rc) : "HTTP " + std::to_string(status) + " " + reply);
      // A refusal (bad request, wrong credentials) is the same on every member; anything else
      // (no leader yet, a member down) may pass.
      if (rc == CURLE_OK && status >= 400 && status < 500)
        throw StoreError("etcd at " + last_error +
                         (credentials_.user.empty()
                              ? " (no etcd user given: if the cluster has authentication enabled, set ETCDCTL_USER "
                                "and ETCDCTL_PASSWORD)"
                              : " (as etcd user " + credentials_.user + ")"));
      current_ = (current_ + 1) % endpoints_.size();
    }
    if (Clock::now() >= deadline)
      throw TimeoutError("etcd: no member answered " + path + " within " + std::to_string(timeout_.count()) +
                         " ms (last: " + last_error + ")");
    std::this_thread::sleep_for(kPause);
  }
}

bool Client::watch_write(const std::string& key, int64_t after, milliseconds within, const std::string& range_end) {
  return watch(key, after, within, range_end).outcome == Watched::Written;
}

Client::Watched Client::watch(const std::string& key, int64_t after, milliseconds within,
                              const std::string& range_end) {
  if (within <= milliseconds(0)) return {Watched::Quiet, 0};
  if (!credentials_.user.empty() && !authenticated_) authenticate();
  json create = {{"key", base64_encode(key)}, {"start_revision", std::to_string(after + 1)}};
  if (!range_end.empty()) create["range_end"] = base64_encode(range_end);
  const std::string request = json{{"create_request", create}}.dump();
  WatchStream stream;
  curl_->post(endpoints_[current_] + "/v3/watch", request, on_watch_data, &stream, std::min(within, kConnectTimeout),
              within);
  ++requests_;
  // Ends at the first event (the callback stops it), at `within`, or on any failure: then the
  // next look goes to the next member.
  const CURLcode rc = curl_easy_perform(curl_->handle);
  long status = 0;
  curl_easy_getinfo(curl_->handle, CURLINFO_RESPONSE_CODE, &status);
  // Refused, or ended by a message that is no event (an expired token says so in the stream):
  // the next watch authenticates again first.
  if (!stream.written && (status == 401 || stream.ended)) authenticated_ = false;
  if (stream.written) return {Watched::Written, stream.revision};
  if (rc == CURLE_OPERATION_TIMEDOUT) return {Watched::Quiet, 0};
  current_ = (current_ + 1) % endpoints_.size();
  return {Watched::Broken, 0};
}

std::optional<KeyValue> Client::get(const std::string& key) {
  json r = call("/v3/kv/range", {{"key", base64_encode(key)}});
  if (!r.contains("kvs") || r["kvs"].empty()) return std::nullopt;
  const json& kv = r["kvs"][0];
  return KeyValue{base64_decode(kv.value("value", "")), number(kv, "mod_revision")};
}

void Client::put(const std::string& key, const std::string& value, int64_t lease) {
  json body = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease) body["lease"] = std::to_string(lease);
  call("/v3/kv/put", body);
}

bool Client::create(const std::string& key, const std::string& value, int64_t lease) {
  json put = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease) put["lease"] = std::to_string(lease);
  json body = {{"compare", {{{"key", base64_encode(key)}, {"target", "CREATE"}, {"create_revision", "0"}}}},
               {"success", {{{"requestPut", put}}}}};
  return call("/v3/kv/txn", body).value("succeeded", false);
}

bool Client::compare_and_swap(const std::string& key, int64_t mod_revision, const std::string& value) {
  json cmp = {{"key", base64_encode(key)}};
  if (mod_revision == 0) {
    cmp["target"] = "CREATE";
    cmp["create_revision"] = "0";
  } else {
    cmp["target"] = "MOD";
    cmp["mod_revision"] = std::to_string(mod_revision);
  }
  json body = {{"compare", {cmp}},
               {"success", {{{"requestPut", {{"key", base64_encode(key)}, {"value", base64_encode(value)}}}}}}};
  return call("/v3/kv/txn", body).value("succeeded", false);
}

bool Client::remove(const std::string& key) {
  return number(call("/v3/kv/deleterange", {{"key", base64_encode(key)}}), "deleted") > 0;
}

int64_t Client::grant(int ttl) {
  json r = call("/v3/lease/grant", {{"TTL", std::to_string(ttl)}});
  if (r.contains("error") && !str(r["error"]).empty()) throw StoreError("etcd: lease refused: " + str(r["error"]));
  return number(r, "ID");
}

bool Client::keep_alive(int64_t lease) {
  json r = call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}});
  return r.contains("result") && number(r["result"], "TTL") > 0;
}

void Client::revoke(int64_t lease) { call("/v3/lease/revoke", {{"ID", std::to_string(lease)}}); }

std::string base64_encode(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()), int(bytes.size()));
  out.resize(size_t(n));
  return out;
}

std::string base64_decode(const std::string& text) {
  if (text.size() % 4 != 0) throw StoreError("etcd: bad base64");
  std::string out(3 * text.size() / 4, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()), int(text.size()));
  if (n < 0) throw StoreError("etcd: bad base64");
  // EVP_DecodeBlock counts the padding as zero bytes.
  size_t pad = text.empty() ? 0 : size_t(text.back() == '=') + size_t(text.size() > 1 && text[text.size() - 2] == '=');
  out.resize(size_t(n) - pad);
  return out;
}

std::vector<std::string> parse_endpoints(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    if (comma > at) out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  if (out.empty()) throw ConfigError("etcd: no endpoint given (HOST:PORT[,HOST:PORT...])");
  return out;
}

}  // namespace distrun::etcd
