// Where worker output goes: the console (with torchrun's "[rankN]:" prefixes, --redirects,
// --tee and --local-ranks-filter applied) and per-rank log files under --log-dir.
#pragma once
#include <cstdio>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "std_spec.hpp"

namespace distrun::launcher {

struct OutputConfig {
  StdSpec redirects;              // streams that go to the files only
  StdSpec tee;                    // streams that go to the files and the console
  std::set<int> console_ranks;    // local ranks shown on the console; empty: all
  std::string attempt_dir;        // LOG_DIR/RUN_ID/attempt_K, empty: no files
};

/// Parses --local-ranks-filter ("0,2"); ConfigError when malformed.
std::set<int> parse_local_ranks_filter(const std::string& text);

/// Routes whole lines from workers. Console writes are single write(2) calls per line, so lines
/// of different workers never interleave mid-line.
class OutputRouter {
 public:
  /// Opens LOCAL_RANK/{stdout,stderr}.log under config.attempt_dir for `nproc` local ranks
  /// whose global ranks start at `rank_offset`. Error when the folder cannot be made.
  OutputRouter(OutputConfig config, int nproc, int rank_offset);
  ~OutputRouter();
  OutputRouter(const OutputRouter&) = delete;
  OutputRouter& operator=(const OutputRouter&) = delete;

  /// One line (ending in '\n') of `local_rank`'s stdout, or its stderr when `is_err`.
  void line(int local_rank, bool is_err, std::string_view text);

 private:
  bool on_console(int local_rank, bool is_err) const;

  OutputConfig config_;
  int rank_offset_;
  std::vector<FILE*> out_files_, err_files_;
};

/// Creates `path` and its parents (mkdir -p); Error naming the path on failure.
void make_directories(const std::string& path);

}  // namespace distrun::launcher
