// torchrun's --redirects / --tee values: which of a worker's streams go where.
#pragma once
#include <map>
#include <string>

namespace distrun::launcher {

/// Which standard streams a setting applies to: 0 none, 1 stdout, 2 stderr, 3 both.
enum class Streams { none = 0, out = 1, err = 2, both = 3 };

/// A setting per local rank, as torchrun takes it: "3" for every rank, or "0:1,1:2" per rank
/// (ranks not named get none).
class StdSpec {
 public:
  StdSpec() = default;
  /// Parses `text` (option `option_name` is named in errors); ConfigError when malformed.
  static StdSpec parse(const std::string& text, const std::string& option_name);
  /// The setting for `local_rank`.
  Streams for_rank(int local_rank) const;
  /// True when the setting for `local_rank` includes stdout (`is_err` false) or stderr.
  bool covers(int local_rank, bool is_err) const;
  /// True when some rank has a non-none setting.
  bool any() const;

 private:
  Streams all_ = Streams::none;
  std::map<int, Streams> per_rank_;
  bool is_per_rank_ = false;
};

}  // namespace distrun::launcher
