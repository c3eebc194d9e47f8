// The flight recorder: every rank keeps its last N collectives (sequence number, op, group,
// bytes, dtype, state, start time, and where in the scenario it was called) in a fixed ring in
// shared memory, so that after a hang, a timeout or a kill -9 someone else (the launcher) can
// read what each rank was doing and name the first rank out of step.
//
// One file holds one region per local rank: the launcher creates it (a memfd, nothing on disk,
// nothing left behind) and names it to the workers by DISTRUN_FLIGHT_RECORDER, a path that
// reaches the launcher's descriptor (/proc/<pid>/fd/<n>); each worker maps its LOCAL_RANK's
// region. Without the variable a rank records in its own memory only.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace distrun {

inline constexpr const char* kFlightRecorderEnv = "DISTRUN_FLIGHT_RECORDER";

enum class FlightState : uint32_t { Started = 1, Completed = 2, Failed = 3 };

struct FlightEntry {
  uint64_t seq = 0;   // per group, from 1: the same collective has the same number on every rank
  std::string op;     // "all_reduce", "send", ...
  std::string group;  // "world", or "g1", "g1.2" for groups in creation order
  std::string dtype;
  std::string origin;  // e.g. "job.yaml:12" (set by the caller, see FlightOrigin)
  int64_t bytes = 0;
  int peer = -1;  // point to point: the peer's group rank; -1 for collectives
  FlightState state = FlightState::Started;
  int64_t start_us = 0;  // wall clock, microseconds since the epoch
  int64_t end_us = 0;    // the same clock to the scheduler tick (coarse); 0 until it ends
};

/// What one rank recorded.
struct RankFlight {
  int rank = -1;
  int world_size = 0;
  int pid = 0;
  std::vector<FlightEntry> entries;  // oldest first
};

/// Where the calls on this thread come from, while alive (the scenario runner sets the step's
/// file:line); recorded with every collective.
class FlightOrigin {
 public:
  explicit FlightOrigin(std::string where);
  ~FlightOrigin();
  FlightOrigin(const FlightOrigin&) = delete;
  FlightOrigin& operator=(const FlightOrigin&) = delete;
  static const std::string& current();

 private:
  std::string previous_;
};

/// A rank's writer into its ring, from any number of threads: no mutex; a per-slot
/// compare-and-swap, contended only when the ring wraps onto a slot still being written.
class FlightRecorder {
 public:
  static constexpr uint32_t kDefaultSlots = 64;

  /// A ring in this process's memory only.
  static std::shared_ptr<FlightRecorder> in_memory(int rank, int world_size, uint32_t slots = kDefaultSlots);
  /// Region `region` of the flight file at `path` (made by FlightFile); ConfigError when the
  /// file is not one or has no such region.
  static std::shared_ptr<FlightRecorder> attach(const std::string& path, int region, int rank, int world_size);

  ~FlightRecorder();

  /// Records the start of an operation; returns its handle for finish().
  uint64_t start(const char* op, const std::string& group, uint64_t seq, int64_t bytes, const char* dtype,
                 int peer = -1);
  void finish(uint64_t handle, FlightState state);
  /// This rank's records, oldest first.
  RankFlight read() const;

  struct Region;

 private:
  FlightRecorder() = default;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  Region* region_ = nullptr;
};

/// The launcher's side: the shared file with one region per local rank.
class FlightFile {
 public:
  /// A memfd sized for `regions` ranks of `slots` records each.
  FlightFile(int regions, uint32_t slots = FlightRecorder::kDefaultSlots);
  ~FlightFile();
  FlightFile(const FlightFile&) = delete;
  FlightFile& operator=(const FlightFile&) = delete;

  /// A path through which another process of this user opens this very file.
  std::string path() const;
  /// Every region a rank attached to.
  std::vector<RankFlight> read() const;

 private:
  int fd_ = -1;
  void* map_ = nullptr;
  size_t size_ = 0;
};

/// Reads every attached region of the flight file at `path`.
std::vector<RankFlight> read_flight_file(const std::string& path);

/// The first place where the ranks' sequences disagree, e.g. "rank 3 in all_gather #17 while
/// the others are in all_reduce #17" or "rank 2 never entered all_reduce #9 (ranks 0, 1, 3
/// did)"; "" when they agree.
std::string first_mismatch(const std::vector<RankFlight>& ranks);

/// True when some rank's last record never finished or failed (a hang, a timeout, a lost peer).
bool any_unfinished(const std::vector<RankFlight>& ranks);

/// One line per rank with its last collective, then each of `notes` (e.g. ranks nobody could
/// read), then the first mismatch if any; "" when nothing was recorded.
std::string describe_flights(const std::vector<RankFlight>& ranks, const std::vector<std::string>& notes = {});

}  // namespace distrun
