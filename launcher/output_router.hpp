// Where worker output goes: the console (with torchrun's "[rankN]:" prefixes, --redirects,
// --tee and --local-ranks-filter applied) and per-rank log files in the run's log folder.
#pragma once
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "std_spec.hpp"

namespace distrun::launcher {

class RunLogDir;

struct OutputConfig {
  StdSpec redirects;            // streams that go to the files only
  StdSpec tee;                  // streams that go to the files and the console
  std::set<int> console_ranks;  // local ranks shown on the console; empty: all
  bool prefix = true;           // "[rankN]:" on the console (off for a lone rank, unless --tee)
};

/// Parses --local-ranks-filter ("0,2"); ConfigError when malformed.
std::set<int> parse_local_ranks_filter(const std::string& text);

/// Routes worker output as it arrives, without waiting for a newline: a prefix is written at
/// the start of every line, a line being ended by '\n' or by '\r' (a progress bar's update
/// appears at once, after its prefix, instead of overwriting it). Each piece is one write(2).
class OutputRouter {
 public:
  /// With `logs` (may be null: no files), opens attempt_K/LOCAL_RANK/{stdout,stderr}.log, each
  /// where --redirects or --tee name that stream, for `nproc` local ranks whose global ranks
  /// start at `rank_offset`.
  OutputRouter(OutputConfig config, int nproc, int rank_offset, RunLogDir* logs, int attempt);
  ~OutputRouter();
  OutputRouter(const OutputRouter&) = delete;
  OutputRouter& operator=(const OutputRouter&) = delete;

  /// Bytes of `local_rank`'s stdout, or its stderr when `is_err`.
  void write(int local_rank, bool is_err, std::string_view bytes);
  /// The first failed write to a log file ("" when none): reported once, and the run fails.
  const std::string& log_error() const { return log_error_; }

 private:
  bool on_console(int local_rank, bool is_err) const;
  void to_log(int fd, const std::string& name, std::string_view bytes);

  OutputConfig config_;
  int rank_offset_;
  std::vector<int> out_files_, err_files_;
  std::vector<std::string> out_names_, err_names_;
  std::vector<char> out_at_start_, err_at_start_;  // the next byte begins a line
  std::string log_error_;
};

}  // namespace distrun::launcher
