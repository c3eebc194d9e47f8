#include "rendezvous_messages.hpp"

#include <algorithm>
#include <cstdio>

namespace distrun::launcher {
namespace {

// A decimal number in [lo, hi], nothing else (no sign but a leading '-', no spaces, at most 9
// digits, so it cannot overflow an int).
int to_int(const std::string& s, int lo, int hi) {
  size_t digits = s.size() - (!s.empty() && s[0] == '-' ? 1 : 0);
  if (digits == 0 || digits > 9 || s.find_first_not_of("0123456789", s.size() - digits) != std::string::npos)
    throw StoreError("bad number");
  int v = std::stoi(s);
  if (v < lo || v > hi) throw StoreError("number out of range");
  return v;
}

// Splits off the first `n` fields ended by '\n'; the rest (possibly empty, possibly holding
// more newlines) is the last element. StoreError when there are fewer than `n` newlines.
std::vector<std::string> fields(const std::string& text, size_t n) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) throw StoreError("too few lines");
    out.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  out.push_back(text.substr(at));
  return out;
}

// Every line, without their '\n'; a text ending in '\n' has an empty last line.
std::vector<std::string> all_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    size_t nl = text.find('\n', at);
    out.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    if (nl == std::string::npos) return out;
    at = nl + 1;
  }
}

// A host name travels inside one field: whitespace (never part of a host name) would split it.
std::string one_field(std::string s) {
  std::replace_if(
      s.begin(), s.end(), [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }, '?');
  return s;
}

bool printable_token(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c > ' ' && c < 127; });
}

// Text from another node goes to this node's terminal: its control characters (an escape
// sequence could rewrite the screen or the title) are shown as \xNN; line breaks and tabs
// stay where `keep_lines`.
std::string escape_controls(const std::string& s, bool keep_lines) {
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 0x20 && c != 0x7f) || (keep_lines && (c == '\n' || c == '\t'))) {
      out.push_back(char(c));
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace

std::string FailureRecord::summary() const {
  std::string s = "host " + host;
  if (node_rank >= 0) s += ", node rank " + std::to_string(node_rank);
  if (rank >= 0) s += ", rank " + std::to_string(rank);
  return s + ": " + cause;
}

std::string FailureRecord::encode() const {
  std::string h = host;
  std::replace(h.begin(), h.end(), '\n', ' ');
  return std::string(joining  ? "2"
                     : final  ? "1"
                     : frozen ? "3"
                              : "0") +
         "\n" + h + "\n" + std::to_string(node_rank) + "\n" + std::to_string(rank) + "\n" + cause;
}

FailureRecord FailureRecord::decode(const std::string& text) {
  FailureRecord r;
  try {
    auto f = fields(text, 4);
    if (f[0].size() != 1 || f[0][0] < '0' || f[0][0] > '3') throw StoreError("bad flag");
    r.final = f[0] == "1";
    r.joining = f[0] == "2";
    r.frozen = f[0] == "3";
    r.host = escape_controls(f[1], false);
    r.node_rank = to_int(f[2], -1, kMaxPlanNodes);
    r.rank = to_int(f[3], -1, 1 << 30);
    r.cause = escape_controls(f[4], true);
  } catch (const StoreError&) {
    throw MalformedMessage("rendezvous: malformed failure record");
  }
  return r;
}

std::string NodeEntry::encode() const {
  return std::to_string(nproc) + " " + (results_given ? "1" : "0") + " " + one_field(host);
}

NodeEntry NodeEntry::decode(const std::string& text) {
  NodeEntry e;
  size_t a = text.find(' '), b = a == std::string::npos ? a : text.find(' ', a + 1);
  try {
    if (b == std::string::npos) throw StoreError("too few fields");
    e.nproc = to_int(text.substr(0, a), 1, 1 << 20);
    std::string results = text.substr(a + 1, b - a - 1);
    if (results != "0" && results != "1") throw StoreError("bad flag");
    e.results_given = results == "1";
    e.host = text.substr(b + 1);
    if (e.host.empty() || one_field(e.host) != e.host) throw StoreError("bad host");
  } catch (const StoreError&) {
    throw MalformedMessage("rendezvous: malformed node entry");
  }
  return e;
}

std::string PlanText::encode() const {
  if (refused) return "refused\n" + message;
  std::string out = "ok\n" + std::to_string(port) + "\n" + salt;
  for (size_t n = 0; n < nproc.size() && n < hosts.size(); ++n)
    out += "\n" + std::to_string(nproc[n]) + " " + one_field(hosts[n]);
  return out;
}

PlanText parse_plan(const std::string& text, int nnodes) {
  PlanText p;
  if (text.rfind("refused\n", 0) == 0 || text == "refused") {
    p.refused = true;
    p.message = text.size() > 8 ? text.substr(8) : "node 0 refused the job";
    return p;
  }
  try {
    if (nnodes < 1 || nnodes > kMaxPlanNodes) throw StoreError("bad node count");
    auto lines = all_lines(text);
    if (lines.size() != size_t(3 + nnodes) || lines[0] != "ok") throw StoreError("bad header");
    p.port = uint16_t(to_int(lines[1], 1, 65535));
    p.salt = lines[2];
    if (p.salt.empty() || p.salt.size() > 256 || !printable_token(p.salt)) throw StoreError("bad salt");
    int64_t world = 0;
    for (int n = 0; n < nnodes; ++n) {
      const std::string& l = lines[size_t(3 + n)];
      size_t sp = l.find(' ');
      if (sp == std::string::npos) throw StoreError("bad node line");
      p.nproc.push_back(to_int(l.substr(0, sp), 1, 1 << 20));
      p.hosts.push_back(l.substr(sp + 1));
      if (p.hosts.back().empty() || one_field(p.hosts.back()) != p.hosts.back()) throw StoreError("bad host");
      world += p.nproc.back();
    }
    // Ranks are ints everywhere (RANK, WORLD_SIZE): the sum must be one too.
    if (world > kMaxWorld) throw StoreError("too many ranks");
  } catch (const StoreError&) {
    throw MalformedMessage("rendezvous: malformed plan from node 0");
  }
  return p;
}

}  // namespace distrun::launcher
