#include "distrun/scenario/model/model.hpp"

#include <algorithm>
#include <cstring>
#include <functional>

namespace distrun::scenario {

const StepArgs Step::kDefaultArgs{};
const StepMore StepArgs::kNoMore{};

size_t Names::slot(std::string_view text) const {
  const size_t mask = table_.size() - 1;
  size_t i = std::hash<std::string_view>{}(text)&mask;
  while (table_[i] && name(table_[i] - 1).view() != text) i = (i + 1) & mask;
  return i;
}

const uint32_t* Names::store(std::string_view text) {
  const size_t words = 2 + (text.size() + 3) / 4;
  if (words > room_) {
    constexpr size_t kBlockWords = 16 * 1024;
    room_ = std::max(words, kBlockWords);
    blocks_.push_back(std::make_unique<uint32_t[]>(room_));
    next_ = blocks_.back().get();
  }
  uint32_t* e = next_;
  next_ += words, room_ -= words;
  e[0] = uint32_t(by_id_.size());
  e[1] = uint32_t(text.size());
  std::memcpy(e + 2, text.data(), text.size());
  return e;
}

Name Names::intern(std::string_view text) {
  if (2 * (by_id_.size() + 1) > table_.size()) {
    table_.assign(std::max<size_t>(16, 2 * table_.size()), 0);
    for (const uint32_t* e : by_id_) table_[slot(Name(e).view())] = e[0] + 1;
  }
  const size_t i = slot(text);
  if (!table_[i]) {
    by_id_.push_back(store(text));
    table_[i] = uint32_t(by_id_.size());
  }
  return name(table_[i] - 1);
}

std::optional<Name> Names::find(std::string_view text) const {
  if (table_.empty()) return std::nullopt;
  const uint32_t i = table_[slot(text)];
  return i ? std::optional<Name>(name(i - 1)) : std::nullopt;
}

void Literals::push_back(const Literal& l) {
  uint64_t bits = 0;
  if (l.integer)
    bits = uint64_t(*l.integer);
  else
    std::memcpy(&bits, &l.real, sizeof bits);
  bits_.push_back(bits);
  integer_.push_back(l.integer.has_value());
}

Literal Literals::operator[](size_t i) const {
  if (integer_[i]) {
    const auto v = int64_t(bits_[i]);
    return {double(v), v};
  }
  Literal l;
  std::memcpy(&l.real, &bits_[i], sizeof l.real);
  return l;
}

const Group* Scenario::find_group(std::string_view group_name) const {
  for (const auto& g : groups)
    if (g.name == group_name) return &g;
  return nullptr;
}

}  // namespace distrun::scenario
