#include "distrun/env/hostlist.hpp"

#include <cctype>
#include <map>
#include <set>

#include "distrun/core/error.hpp"

namespace distrun {

namespace {

[[noreturn]] void bad(const std::string& expr, const std::string& why) {
  throw ConfigError("hostlist '" + expr + "': " + why);
}

// Expands one bracket body "01-04,07" into its items, keeping the width of zero-padded bounds.
std::vector<std::string> expand_range_list(const std::string& expr, const std::string& body, size_t limit) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= body.size()) {
    size_t comma = body.find(',', at);
    std::string item = body.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item.empty()) bad(expr, "empty range");
    size_t dash = item.find('-');
    std::string lo = item.substr(0, dash), hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    for (const std::string* s : {&lo, &hi}) {
      if (s->empty() || s->size() > 18) bad(expr, "bad range '" + item + "'");
      for (char c : *s)
        if (!std::isdigit(static_cast<unsigned char>(c))) bad(expr, "bad range '" + item + "'");
    }
    unsigned long long a = std::stoull(lo), b = std::stoull(hi);
    if (b < a) bad(expr, "descending range '" + item + "'");
    if (b - a >= limit || out.size() + (b - a) >= limit) bad(expr, "expands to too many hosts");
    size_t width = lo.size() > 1 && lo[0] == '0' ? lo.size() : 0;
    for (unsigned long long v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      out.push_back(s);
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// Expands one top-level item (no commas outside brackets).
void expand_item(const std::string& expr, const std::string& item, std::vector<std::string>& out, size_t limit) {
  std::vector<std::string> partial{""};
  size_t at = 0;
  while (at < item.size()) {
    size_t open = item.find('[', at);
    std::string literal = item.substr(at, open == std::string::npos ? std::string::npos : open - at);
    if (literal.find(']') != std::string::npos) bad(expr, "unbalanced ']'");
    for (auto& p : partial) p += literal;
    if (open == std::string::npos) break;
    size_t close = item.find(']', open);
    if (close == std::string::npos) bad(expr, "unbalanced '['");
    auto values = expand_range_list(expr, item.substr(open + 1, close - open - 1), limit);
    if (partial.size() * values.size() > limit) bad(expr, "expands to too many hosts");
    std::vector<std::string> next;
    next.reserve(partial.size() * values.size());
    for (const auto& p : partial)
      for (const auto& v : values) next.push_back(p + v);
    partial.swap(next);
    at = close + 1;
  }
  if (out.size() + partial.size() > limit) bad(expr, "expands to too many hosts");
  for (auto& p : partial) {
    if (p.empty()) bad(expr, "empty host name");
    out.push_back(std::move(p));
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& expr, size_t limit) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= expr.size(); ++i) {
    char c = i < expr.size() ? expr[i] : ',';
    if (c == '[') {
      if (++depth > 1) bad(expr, "nested '['");
    } else if (c == ']') {
      if (--depth < 0) bad(expr, "unbalanced ']'");
    } else if (c == ',' && depth == 0) {
      std::string item = expr.substr(start, i - start);
      if (item.empty()) bad(expr, "empty host name");
      expand_item(expr, item, out, limit);
      start = i + 1;
    }
  }
  if (depth != 0) bad(expr, "unbalanced '['");
  return out;
}

std::string compress_hostlist(const std::vector<std::string>& hosts) {
  // prefix -> {digit width -> numbers}; hosts without a numeric tail stand alone.
  std::map<std::string, std::map<size_t, std::set<long long>>> numbered;
  std::set<std::string> plain;
  for (const auto& h : hosts) {
    size_t k = h.size();
    while (k > 0 && std::isdigit(static_cast<unsigned char>(h[k - 1]))) --k;
    if (k == h.size() || h.size() - k > 18) {
      plain.insert(h);
      continue;
    }
    const std::string digits = h.substr(k);
    numbered[h.substr(0, k)][digits[0] == '0' ? digits.size() : 0].insert(std::stoll(digits));
  }
  std::vector<std::string> parts;
  for (const auto& [prefix, by_width] : numbered)
    for (const auto& [width, nums] : by_width) {
      auto pad = [w = width](long long v) {
        std::string s = std::to_string(v);
        return s.size() < w ? std::string(w - s.size(), '0') + s : s;
      };
      if (nums.size() == 1) {
        parts.push_back(prefix + pad(*nums.begin()));
        continue;
      }
      std::string ranges;
      for (auto it = nums.begin(); it != nums.end();) {
        long long lo = *it, hi = lo;
        while (++it != nums.end() && *it == hi + 1) ++hi;
        ranges += (ranges.empty() ? "" : ",") + pad(lo) + (hi > lo ? "-" + pad(hi) : "");
      }
      parts.push_back(prefix + "[" + ranges + "]");
    }
  for (const auto& h : plain) parts.push_back(h);
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

}  // namespace distrun
