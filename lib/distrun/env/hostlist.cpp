#include "distrun/env/hostlist.hpp"

#include <cctype>

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

}  // namespace distrun
