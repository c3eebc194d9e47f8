#include "std_spec.hpp"

#include "distrun/core/error.hpp"

namespace distrun::launcher {
namespace {

Streams parse_streams(const std::string& v, const std::string& text, const std::string& option) {
  if (v.size() == 1 && v[0] >= '0' && v[0] <= '3') return Streams(v[0] - '0');
  throw ConfigError(option + " " + text + ": expected 0 (none), 1 (stdout), 2 (stderr), 3 (both) " +
                    "or a per-rank list such as 0:1,1:2");
}

int parse_rank(const std::string& v, const std::string& text, const std::string& option) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 9)
    throw ConfigError(option + " " + text + ": '" + v + "' is not a local rank");
  return std::stoi(v);
}

}  // namespace

StdSpec StdSpec::parse(const std::string& text, const std::string& option) {
  StdSpec spec;
  if (text.find(':') == std::string::npos) {
    spec.all_ = parse_streams(text, text, option);
    return spec;
  }
  spec.is_per_rank_ = true;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    size_t colon = item.find(':');
    if (colon == std::string::npos) throw ConfigError(option + " " + text + ": '" + item + "' is not RANK:VALUE");
    int rank = parse_rank(item.substr(0, colon), text, option);
    spec.per_rank_[rank] = parse_streams(item.substr(colon + 1), text, option);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return spec;
}

Streams StdSpec::for_rank(int local_rank) const {
  if (!is_per_rank_) return all_;
  auto it = per_rank_.find(local_rank);
  return it == per_rank_.end() ? Streams::none : it->second;
}

bool StdSpec::covers(int local_rank, bool is_err) const {
  int bits = int(for_rank(local_rank));
  return bits & (is_err ? 2 : 1);
}

bool StdSpec::any() const {
  if (!is_per_rank_) return all_ != Streams::none;
  for (auto& [rank, s] : per_rank_)
    if (s != Streams::none) return true;
  return false;
}

}  // namespace distrun::launcher
