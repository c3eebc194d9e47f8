// The --results file: JSON Lines written to a temporary file beside the target and renamed
// into place at the end, so a reader never sees a partial file.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

namespace distrun::scenario {

class ResultsFile {
 public:
  /// Creates the temporary file now, so an unwritable path is an error before any step runs
  /// (ConfigError naming the path and the reason).
  explicit ResultsFile(const std::string& path);
  ~ResultsFile();  // removes the temporary file when commit() was not reached
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;

  /// Writes every line (each a JSON record without newline), then renames into place.
  void commit(const std::vector<std::string>& lines);

 private:
  std::string path_;
  std::string tmp_path_;
  std::FILE* file_ = nullptr;
};

}  // namespace distrun::scenario
