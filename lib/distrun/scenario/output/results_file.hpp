// The --results file: JSON Lines written to an unnamed temporary file in the target's folder
// and given its name only when complete, so a reader never sees a partial file and a rank
// that is killed (SIGKILL, or SIGTERM when the launcher stops a failed job) leaves nothing.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

namespace distrun::scenario {

class ResultsFile {
 public:
  /// Creates the temporary file now, so an unwritable path is an error before any step runs
  /// (ConfigError naming the path and the reason). `path` must be a regular file or a new
  /// name in an existing folder: a directory, FIFO, device, socket or symbolic link in its
  /// place is refused (replacing /dev/stdout or a link's target is never what was meant), as
  /// is the file `keep` (the scenario itself). Where the filesystem supports O_TMPFILE the
  /// file has no name until commit(); elsewhere it is `path.tmp.<pid>`.
  explicit ResultsFile(const std::string& path, const std::string& keep = "");
  ~ResultsFile();  // removes a named temporary file when commit() was not reached
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;

  /// Writes every line (each a JSON record without newline), then moves the file into place.
  /// Throws Error naming the path and the reason (e.g. no space left); nothing is left then.
  void commit(const std::vector<std::string>& lines);

 private:
  std::string path_;
  std::string tmp_path_;
  bool unnamed_ = false;  // O_TMPFILE: tmp_path_ exists only between link and rename in commit()
  std::FILE* file_ = nullptr;
};

}  // namespace distrun::scenario
