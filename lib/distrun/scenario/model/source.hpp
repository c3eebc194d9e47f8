// Where things are in a scenario file, for `file:line:col: message` errors, and the helpers
// that read YAML with those positions kept (UTF-8 check, did-you-mean suggestions).
#pragma once
#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "distrun/core/error.hpp"

namespace distrun::scenario {

/// A 1-based line and column in the scenario file (0 when unknown).
struct Mark {
  int line = 0;
  int col = 0;
};

/// The line a model element's marks count from: 0 for the file's own; a step's line for those
/// in its arguments (model.hpp's StepArgs).
struct Origin {
  int line = 0;
  /// `m` as a mark in the file (an unknown mark stays unknown).
  Mark at(Mark m) const { return m.line == 0 && m.col == 0 ? m : Mark{m.line + line, m.col}; }
};

/// Builds ConfigError("file:line:col: message").
ConfigError error_at(const std::string& file, Mark mark, const std::string& message);

/// Reads `path` whole, its line ends made '\n' (YAML also ends lines with "\r\n" or a lone
/// "\r"). ConfigError when it is not a regular file (refused by its type before reading), is
/// larger than max_scenario_bytes(), cannot be read or is not valid UTF-8 (naming the line
/// and column of the first bad byte).
std::string read_scenario_text(const std::string& path);

/// What a file that is not a regular one is ("a directory", "a FIFO", ...), for messages.
const char* file_kind(mode_t mode);

/// `text` with every "\r\n" and lone "\r" made "\n".
std::string normalize_line_ends(std::string text);

/// `text` as a message may echo it: whole when short, else its first characters and its length
/// (a name of a megabyte is not printed back).
std::string excerpt(std::string_view text, size_t max = 64);

/// " (did you mean 'x'?)" for the candidate closest to `word` in edit distance, or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

/// Levenshtein distance between two strings.
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace distrun::scenario
