#include "distrun/scenario/model/source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "distrun/scenario/model/limits.hpp"

namespace distrun::scenario {

ConfigError error_at(const std::string& file, Mark mark, const std::string& message) {
  return ConfigError(file + ":" + std::to_string(mark.line) + ":" + std::to_string(mark.col) + ": " + message);
}

namespace {

// Length of the UTF-8 sequence at s[i], or 0 when it is not a valid one (overlong forms,
// surrogates and code points above U+10FFFF are rejected, as RFC 3629 requires).
size_t utf8_sequence_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned c = b(i);
  const auto cont = [&](size_t k) { return (b(k) & 0xC0u) == 0x80u; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned c1 = b(i + 1);
    if (c == 0xE0 && c1 < 0xA0) return 0;
    if (c == 0xED && c1 > 0x9F) return 0;
    return cont(i + 1) && cont(i + 2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned c1 = b(i + 1);
    if (c == 0xF0 && c1 < 0x90) return 0;
    if (c == 0xF4 && c1 > 0x8F) return 0;
    return cont(i + 1) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  }
  return 0;
}

std::string hex_byte(unsigned c) {
  const char* hex = "0123456789abcdef";
  return std::string{hex[(c >> 4) & 15], hex[c & 15]};
}

}  // namespace

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string normalize_line_ends(std::string text) {
  if (text.find('\r') == std::string::npos) return text;
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r')
      out += text[i];
    else if (i + 1 >= text.size() || text[i + 1] != '\n')
      out += '\n';
  }
  return out;
}

std::string read_scenario_text(const std::string& path) {
  // Opened without blocking (a FIFO would wait for a writer forever) and judged by its type
  // and size before a byte is read: a link to /dev/zero, a FIFO or a directory is refused
  // by what it is, and a file past the bound by its size.
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) throw ConfigError(path + ":0:0: cannot read the scenario file: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw ConfigError(path + ":0:0: cannot read the scenario file: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw ConfigError(path + ":0:0: the scenario is " + file_kind(st.st_mode) + ", not a regular file");
  const int64_t bound = max_scenario_bytes();
  const auto too_big = [&] {
    return ConfigError(path + ":0:0: the scenario file is larger than " + human_bytes(double(bound)) +
                       " (DISTRUN_SCENARIO_MAX_BYTES sets the bound)");
  };
  if (st.st_size > bound) throw too_big();
  // Read to one byte past the bound at most: a file that grows meanwhile is refused as well.
  std::string text;
  text.reserve(size_t(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ConfigError(path + ":0:0: cannot read the scenario file: " + std::strerror(errno));
    if (n == 0) break;
    text.append(chunk, size_t(n));
    if (int64_t(text.size()) > bound) throw too_big();
  }
  text = normalize_line_ends(std::move(text));
  int line = 1, col = 1;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0)
      throw error_at(path, {line, col},
                     "the file is not valid UTF-8 (bad byte 0x" + hex_byte(static_cast<unsigned char>(text[i])) + ")");
    // YAML allows no control characters but tab, line feed and carriage return: refused here
    // with the place, before the parser sees the text.
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
      throw error_at(path, {line, col}, "control character 0x" + hex_byte(c) + " is not allowed in a YAML file");
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
    i += n;
  }
  return text;
}

std::string excerpt(std::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0u) == 0x80u) --cut;  // not inside a UTF-8 sequence
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // Only suggest near misses: at most a third of the word wrong (and at least one edit allowed).
  if (best.empty() || best_d > std::max<size_t>(2, word.size() / 3)) return "";
  return " (did you mean '" + best + "'?)";
}

}  // namespace distrun::scenario
