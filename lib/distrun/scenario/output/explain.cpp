#include "distrun/scenario/output/explain.hpp"

#include <algorithm>
#include <map>

#include "distrun/scenario/check/local_ops.hpp"
#include "distrun/scenario/check/reference.hpp"
#include "distrun/scenario/model/op_table.hpp"
#include "distrun/scenario/output/format.hpp"

namespace distrun::scenario {

namespace {

std::vector<Block> chunks_of(int rank, int n) {
  std::vector<Block> out;
  for (int c = 0; c < n; ++c) out.push_back({rank, c});
  return out;
}

std::string label(const Block& b) {
  std::string s = b.from < 0 ? "\u03a3" : std::to_string(b.from);
  if (b.chunk >= 0) s += "." + std::to_string(b.chunk);
  if (b.size >= 0) s += "(" + std::to_string(b.size) + ")";
  return s;
}

// Uneven chunks: each block of a step with split_sizes gets its size along dim, as its
// source rank's split_sizes give it (the explained world is on one host).
void size_chunks(Picture& p, const Step& s, const std::vector<int>& members, int world_size) {
  std::map<int, std::vector<int64_t>> splits;
  for (int r : members) {
    const RankEnv env{r, world_size, r, world_size};
    for (const auto& num : s.args().more().split_sizes) splits[r].push_back(int64_t(eval_number(num, env)));
  }
  for (auto& rp : p.ranks)
    for (auto* blocks : {&rp.before, &rp.after})
      for (auto& b : *blocks)
        if (b.from >= 0 && b.chunk >= 0) b.size = splits[b.from].at(size_t(b.chunk));
  p.note = "(n): the chunk's size along dim " + std::to_string(s.args().dim) + ", from each sender's split_sizes";
}

// What the blocks of a picture are cut along.
std::string blocks_heading(const Step& s, const Picture& p) {
  if (!p.column_blocks) return "  (row blocks, dim 0)";
  if (s.args().dim == 1) return "  (column blocks, dim 1)";
  return "  (blocks along dim " + std::to_string(s.args().dim) + ", side by side)";
}

// Visible width of a label (Σ is one column, two bytes).
size_t width_of(const std::string& s) {
  size_t w = 0;
  for (unsigned char c : s) w += (c & 0xC0) != 0x80;
  return w;
}

std::string paint(const Block& b, size_t width, bool colour) {
  std::string text = label(b);
  text = std::string((width - width_of(text)) / 2, ' ') + text;
  text += std::string(width - width_of(text), ' ');
  if (!colour) return text;
  // Six distinguishable background colours, by rank; the reduction in reverse video.
  static const char* kColours[] = {"41", "42", "43", "44", "45", "46"};
  const std::string code = b.from < 0 ? "7" : std::string("30;") + kColours[b.from % 6];
  return "\033[" + code + "m" + text + "\033[0m";
}

// The lines that draw `blocks`: one line for column blocks, one line per block for row blocks.
std::vector<std::string> draw(const std::vector<Block>& blocks, bool columns, size_t width, bool colour) {
  std::vector<std::string> lines;
  if (blocks.empty()) return {"(nothing)"};
  if (columns) {
    std::string line = "|";
    for (const auto& b : blocks) line += paint(b, width, colour) + "|";
    lines.push_back(line);
  } else {
    for (const auto& b : blocks) lines.push_back("|" + paint(b, width, colour) + "|");
  }
  return lines;
}

size_t visible(const std::string& s) {
  size_t w = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\033') {
      while (i < s.size() && s[i] != 'm') ++i;
      continue;
    }
    w += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
  }
  return w;
}

void render(const Picture& p, std::ostream& out, bool colour) {
  size_t width = 3;
  for (const auto& r : p.ranks)
    for (const auto* v : {&r.before, &r.after})
      for (const auto& b : *v) width = std::max(width, width_of(label(b)) + 2);
  for (const auto& r : p.ranks) {
    const auto before = draw(r.before, p.column_blocks, width, colour);
    const auto after =
        r.has_after ? draw(r.after, p.column_blocks, width, colour) : std::vector<std::string>{"(no result)"};
    size_t left = 0;
    for (const auto& l : before) left = std::max(left, visible(l));
    const size_t lines = std::max(before.size(), after.size());
    for (size_t i = 0; i < lines; ++i) {
      std::string head = i == 0 ? "  rank " + std::to_string(r.rank) + ": " : "";
      head += std::string(std::max<size_t>(0, 12 - std::min<size_t>(12, visible(head))), ' ');
      const std::string l = i < before.size() ? before[i] : "";
      std::string line = head + l + std::string(left - visible(l), ' ') + (i == 0 ? "  ->  " : "      ") +
                         (i < after.size() ? after[i] : "");
      line.erase(line.find_last_not_of(' ') + 1);
      out << line << "\n";
    }
  }
  if (!p.note.empty()) out << "  " << p.note << "\n";
}

}  // namespace

Picture whole_from(const Step& s, const std::vector<int>& members, int src, bool only_dst) {
  Picture p;
  for (int r : members) {
    const bool gets = !only_dst || r == s.args().dst;
    p.ranks.push_back({r, {{r, -1}}, gets ? std::vector<Block>{{src, -1}} : std::vector<Block>{}, gets});
  }
  return p;
}

Picture scatter_picture(const Step& s, const std::vector<int>& members, bool reduced) {
  Picture p;
  p.column_blocks = s.args().dim >= 1;
  const int n = int(members.size());
  for (int g = 0; g < n; ++g) {
    const int r = members[size_t(g)];
    RankPicture rp{r, chunks_of(r, n), {{reduced ? -1 : s.args().src, g}}, true};
    if (!reduced && r != s.args().src) rp.before = {};  // only src's input is read
    p.ranks.push_back(rp);
  }
  return p;
}

Picture gather_picture(const Step& s, const std::vector<int>& members, int only_dst) {
  Picture p;
  p.column_blocks = s.args().dim >= 1;
  for (int r : members) {
    RankPicture rp{r, {{r, -1}}, {}, only_dst < 0 || r == only_dst};
    if (rp.has_after)
      for (int q : members) rp.after.push_back({q, -1});
    p.ranks.push_back(rp);
  }
  return p;
}

Picture reduce_picture(const Step& s, const std::vector<int>& members, int only_dst) {
  Picture p;
  for (int r : members) p.ranks.push_back({r, {{r, -1}}, {{-1, -1}}, only_dst < 0 || r == only_dst});
  p.note = std::string("\u03a3 = ") + reduce_op_name(s.args().reduce) + " over ranks elementwise";
  return p;
}

Picture all_to_all_picture(const Step& s, const std::vector<int>& members) {
  Picture p;
  p.column_blocks = s.args().dim >= 1;
  const int n = int(members.size());
  for (int j = 0; j < n; ++j) {
    RankPicture rp{members[size_t(j)], chunks_of(members[size_t(j)], n), {}, true};
    for (int r = 0; r < n; ++r) rp.after.push_back({members[size_t(r)], j});
    p.ranks.push_back(rp);
  }
  return p;
}

namespace {

// Each rank's tensors as the steps leave them, for --explain --values: the reference's
// expected results, step by step, over the tensors the specs make.
class HeldValues {
 public:
  HeldValues(const Scenario& sc, int world_size) : sc_(sc), world_size_(world_size), ref_(sc, world_size, world_size) {
    held_.resize(size_t(world_size));
    for (int r = 0; r < world_size; ++r)
      for (const auto& [name, spec] : sc.tensors) held_[size_t(r)][name] = make_tensor(spec, sc.dtype, env(r), sc.file);
  }

  void write(const Step& s, const std::vector<int>& members, std::ostream& out) {
    for (int r : members) {
      std::string line = "  rank " + std::to_string(r) + ": ";
      if (s.args().has_input) line += shown(input(s, r)) + "  ->  ";
      const Expected& e = ref_.expected(s.index, r);
      if (e.object)
        line += python_repr(*e.object);
      else if (e.has_result && e.tensor.value.defined())
        line += shown(e.tensor.value);
      else
        line += "(no result)";
      out << line << "\n";
    }
    for (int r : members) {  // after the step has read every member's input
      const Expected& e = ref_.expected(s.index, r);
      if (e.has_result && !e.object && e.tensor.value.defined()) held_[size_t(r)][s.output.str()] = e.tensor.value;
    }
  }

 private:
  RankEnv env(int r) const { return RankEnv{r, world_size_, r, world_size_}; }
  std::optional<Tensor> input(const Step& s, int r) const {
    if (s.args().input.spec) return make_tensor(*s.args().input.spec, sc_.dtype, env(r), sc_.file, s.origin());
    const auto& mine = held_[size_t(r)];
    if (auto it = mine.find(s.input.str()); it != mine.end()) return it->second;
    return std::nullopt;
  }
  static std::string shown(const std::optional<Tensor>& t) {
    if (!t) return "(none)";
    std::string text = format_values(*t);
    for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1)) text.replace(at, 1, " ");
    return text;
  }

  const Scenario& sc_;
  int world_size_;
  Reference ref_;
  std::vector<std::map<std::string, Tensor>> held_;
};

}  // namespace

void explain(const Scenario& sc, int world_size, std::ostream& out, bool colour, bool values) {
  std::optional<HeldValues> held;
  if (values) held.emplace(sc, world_size);
  out << "Scenario '" << sc.name << "' on " << world_size << (world_size == 1 ? " rank" : " ranks")
      << ": each block is named by its source (\"2\": rank 2's tensor, \"2.1\": chunk 1 of it, \"\u03a3\": the "
         "reduction over the ranks)\n";
  for (const auto& s : sc.steps) {
    const OpSpec& spec = sc.spec(s.op);
    std::vector<int> members;
    if (s.group)
      members = sc.find_group(s.group.view())->members;
    else
      for (int r = 0; r < world_size; ++r) members.push_back(r);
    out << "\nstep " << s.index << ": " << spec.name << (spec.header_detail ? spec.header_detail(s) : "");
    if (s.args().has_input)
      out << "  " << (s.input.str().empty() ? std::string("(inline)") : s.input.str()) << " -> " << s.output.str();
    if (s.group) out << "  group " << s.group.str();
    if (!spec.picture) {
      out << "\n  " << (spec.object_result ? "objects" : "no data moves between ranks") << "\n";
      if (held) held->write(s, members, out);
      continue;
    }
    Picture p = spec.picture(s, members);
    if (s.args().more().has_split_sizes) size_chunks(p, s, members, world_size);
    bool blocks = false;
    for (const auto& r : p.ranks) blocks = blocks || r.before.size() > 1 || r.after.size() > 1;
    if (spec.object_result)
      out << "  (objects, whole)";
    else if (blocks)
      out << blocks_heading(s, p);
    out << "\n";
    render(p, out, colour);
    if (held) held->write(s, members, out);
  }
}

}  // namespace distrun::scenario
