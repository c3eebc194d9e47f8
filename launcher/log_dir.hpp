// The folder of one run's worker logs and error files: LOG_DIR/RUN_ID_XXXXXXXX (as torchrun's
// `<run_id>_<random>`), made fresh for every run so no run overwrites another. Everything below
// it is created by distrun relative to descriptors it opened itself, never through a symlink.
#pragma once
#include <string>

namespace distrun::launcher {

class RunLogDir {
 public:
  /// Creates LOG_DIR (and its parents) when missing, then a fresh RUN_ID_XXXXXXXX inside it
  /// (mode 0700). ConfigError when LOG_DIR itself is a symlink or not a folder, Error when the
  /// folder cannot be made. `remove_at_end`: a private folder removed with everything in it.
  RunLogDir(const std::string& log_dir, const std::string& run_id, bool remove_at_end);
  ~RunLogDir();
  RunLogDir(const RunLogDir&) = delete;
  RunLogDir& operator=(const RunLogDir&) = delete;

  /// Keeps a private folder after all (it holds an error file the summary named).
  void keep() { remove_at_end_ = false; }
  /// The run's folder (absolute or as LOG_DIR was given).
  const std::string& path() const { return path_; }
  /// Makes attempt_K/LOCAL_RANK (no symlink followed) and returns its path.
  std::string make_rank_dir(int attempt, int local_rank);
  /// Opens a new file `name` in attempt_K/LOCAL_RANK for writing (O_NOFOLLOW; the run folder is fresh and private); Error
  /// naming the path when it cannot.
  int create_file(int attempt, int local_rank, const std::string& name);

 private:
  std::string path_;
  int fd_ = -1;  // the run folder, opened O_DIRECTORY|O_NOFOLLOW
  bool remove_at_end_;
};

}  // namespace distrun::launcher
