#include "distrun/backend/flight_recorder.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "distrun/core/error.hpp"

namespace distrun {

namespace {

constexpr char kMagic[8] = {'D', 'R', 'F', 'L', 'I', 'G', 'H', 'T'};
constexpr uint32_t kVersion = 2;

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t regions;
  uint32_t slots;
  uint32_t reserved[11];
};
static_assert(sizeof(FileHeader) == 64);

// One record. `gen` is odd while a writer is inside it, so a reader never takes a half
// written record for a whole one (the writer may be killed or frozen anywhere). `index` is the
// record's number: a slot whose record is claimed but not yet begun still holds the one a ring
// older, which a reader must not take for it.
struct Slot {
  uint64_t gen;
  uint64_t index;
  uint64_t seq;
  int64_t bytes;
  int64_t start_us;
  int64_t end_us;
  int32_t peer;
  uint32_t state;
  char op[24];
  char group[24];
  char dtype[16];
  char origin[136];
};
static_assert(sizeof(Slot) == 256);

void put(char* dst, size_t n, std::string_view s) {
  size_t len = std::min(n - 1, s.size());
  std::memcpy(dst, s.data(), len);
  dst[len] = '\0';
}
std::string get(const char* src, size_t n) { return std::string(src, strnlen(src, n)); }

int64_t us_of(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return int64_t(t.tv_sec) * 1000000 + t.tv_nsec / 1000;
}

thread_local std::string t_origin;

}  // namespace

struct FlightRecorder::Region {
  int32_t rank;  // -1 until a rank attaches
  int32_t world_size;
  int32_t pid;
  uint32_t slots;
  uint64_t written;  // records ever claimed; the ring holds the last `slots`
  uint64_t reserved[5];
  Slot slot[1];  // `slots` of them
};
static_assert(offsetof(FlightRecorder::Region, slot) == 64);

namespace {

size_t region_bytes(uint32_t slots) { return 64 + size_t(slots) * sizeof(Slot); }

FlightRecorder::Region* region_at(void* base, uint32_t slots, int i) {
  return reinterpret_cast<FlightRecorder::Region*>(static_cast<char*>(base) + sizeof(FileHeader) +
                                                   size_t(i) * region_bytes(slots));
}

// `slots` from the file's header, which never changes: a region being set up again (a
// restarted worker clears it) may show 0 there for a moment.
RankFlight read_region(const FlightRecorder::Region* r, uint32_t slots) {
  RankFlight out;
  out.rank = __atomic_load_n(&r->rank, __ATOMIC_ACQUIRE);
  out.world_size = r->world_size;
  out.pid = r->pid;
  const uint64_t written = __atomic_load_n(&r->written, __ATOMIC_ACQUIRE);
  if (slots == 0 || r->slots != slots) return out;
  const uint64_t first = written > slots ? written - slots : 0;
  for (uint64_t i = first; i < written; ++i) {
    const Slot& s = r->slot[i % slots];
    const uint64_t g1 = __atomic_load_n(&s.gen, __ATOMIC_ACQUIRE);
    if (g1 == 0 || (g1 & 1)) continue;  // never written, or being written (or its writer died inside it)
    if (s.index != i) continue;         // claimed, not yet begun
    FlightEntry e;
    e.seq = s.seq;
    e.bytes = s.bytes;
    e.start_us = s.start_us;
    e.end_us = s.end_us;
    e.peer = s.peer;
    e.state = FlightState(s.state);
    e.op = get(s.op, sizeof s.op);
    e.group = get(s.group, sizeof s.group);
    e.dtype = get(s.dtype, sizeof s.dtype);
    e.origin = get(s.origin, sizeof s.origin);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);  // the fields above are read before gen again
    if (__atomic_load_n(&s.gen, __ATOMIC_RELAXED) != g1) continue;
    out.entries.push_back(std::move(e));
  }
  return out;
}

void init_region(FlightRecorder::Region* r, uint32_t slots, int rank, int world_size) {
  std::memset(static_cast<void*>(r), 0, region_bytes(slots));
  r->slots = slots;
  r->world_size = world_size;
  r->pid = int32_t(getpid());
  __atomic_store_n(&r->rank, rank, __ATOMIC_RELEASE);
}

const FileHeader* check_header(const void* base, size_t size, const std::string& path) {
  const auto* h = static_cast<const FileHeader*>(base);
  if (size < sizeof(FileHeader) || std::memcmp(h->magic, kMagic, 8) != 0 || h->version != kVersion || h->slots == 0 ||
      size < sizeof(FileHeader) + size_t(h->regions) * region_bytes(h->slots))
    throw ConfigError(std::string(kFlightRecorderEnv) + "=" + path + ": not a distrun flight recorder file");
  return h;
}

}  // namespace

FlightOrigin::FlightOrigin(std::string where) : previous_(std::move(t_origin)) { t_origin = std::move(where); }
FlightOrigin::~FlightOrigin() { t_origin = std::move(previous_); }
const std::string& FlightOrigin::current() { return t_origin; }

std::shared_ptr<FlightRecorder> FlightRecorder::in_memory(int rank, int world_size, uint32_t slots) {
  std::shared_ptr<FlightRecorder> r(new FlightRecorder());
  r->map_size_ = region_bytes(slots);
  r->map_ = mmap(nullptr, r->map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r->map_ == MAP_FAILED) throw Error(std::string("flight recorder: mmap: ") + std::strerror(errno));
  r->region_ = static_cast<Region*>(r->map_);
  init_region(r->region_, slots, rank, world_size);
  return r;
}

std::shared_ptr<FlightRecorder> FlightRecorder::attach(const std::string& path, int region, int rank, int world_size) {
  const std::string what = std::string(kFlightRecorderEnv) + "=" + path;
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw ConfigError(what + ": " + std::strerror(errno));
  struct stat st {};
  fstat(fd, &st);
  std::shared_ptr<FlightRecorder> r(new FlightRecorder());
  r->map_size_ = size_t(st.st_size);
  r->map_ = r->map_size_ ? mmap(nullptr, r->map_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (r->map_ == MAP_FAILED) {
    r->map_ = nullptr;
    throw ConfigError(what + ": cannot map it");
  }
  const FileHeader* h = check_header(r->map_, r->map_size_, path);
  if (region < 0 || uint32_t(region) >= h->regions)
    throw ConfigError(what + ": no region for local rank " + std::to_string(region) + " (it has " +
                      std::to_string(h->regions) + ")");
  r->region_ = region_at(r->map_, h->slots, region);
  init_region(r->region_, h->slots, rank, world_size);
  return r;
}

FlightRecorder::~FlightRecorder() {
  if (map_) munmap(map_, map_size_);
}

namespace {

// A writer enters a slot alone: gen from even to odd. Another writer is inside only when it
// took the slot a whole ring earlier and was preempted there (threads recording on one rank),
// so this waits for it, yielding its core.
uint64_t enter(Slot& s) {
  for (;;) {
    uint64_t g = __atomic_load_n(&s.gen, __ATOMIC_RELAXED);
    if (!(g & 1) && __atomic_compare_exchange_n(&s.gen, &g, g + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
      __atomic_thread_fence(__ATOMIC_RELEASE);  // a reader sees gen odd before any field changes
      return g + 1;
    }
    sched_yield();
  }
}
void leave(Slot& s, uint64_t inside) { __atomic_store_n(&s.gen, inside + 1, __ATOMIC_RELEASE); }

}  // namespace

// Lock-free, as it runs twice in every collective: a record's number is claimed with one
// atomic add, and its slot entered alone (enter). One precise clock read per record: the end
// is read from the coarse clock (to the scheduler tick), which is all that telling a finished
// record from a stuck one needs.
uint64_t FlightRecorder::start(const char* op, const std::string& group, uint64_t seq, int64_t bytes, const char* dtype,
                               int peer) {
  const uint64_t handle = __atomic_fetch_add(&region_->written, 1, __ATOMIC_ACQ_REL);
  Slot& s = region_->slot[handle % region_->slots];
  const uint64_t inside = enter(s);
  // A record a whole ring newer in the slot already (we were preempted since the claim): ours
  // is one the ring no longer keeps.
  if (inside > 1 && s.index > handle) {
    leave(s, inside);
    return handle;
  }
  s.index = handle;
  s.seq = seq;
  s.bytes = bytes;
  s.start_us = us_of(CLOCK_REALTIME);
  s.end_us = 0;
  s.peer = peer;
  s.state = uint32_t(FlightState::Started);
  put(s.op, sizeof s.op, op);
  put(s.group, sizeof s.group, group);
  put(s.dtype, sizeof s.dtype, dtype ? dtype : "");
  put(s.origin, sizeof s.origin, FlightOrigin::current());
  leave(s, inside);
  return handle;
}

void FlightRecorder::finish(uint64_t handle, FlightState state) {
  Slot& s = region_->slot[handle % region_->slots];
  const uint64_t inside = enter(s);
  if (s.index == handle) {  // else overwritten
    s.state = uint32_t(state);
    s.end_us = std::max(us_of(CLOCK_REALTIME_COARSE), s.start_us);
  }
  leave(s, inside);
}

RankFlight FlightRecorder::read() const { return read_region(region_, region_->slots); }

FlightFile::FlightFile(int regions, uint32_t slots) {
  fd_ = memfd_create("distrun-flight", MFD_CLOEXEC);
  if (fd_ < 0) throw Error(std::string("flight recorder: memfd_create: ") + std::strerror(errno));
  size_ = sizeof(FileHeader) + size_t(regions) * region_bytes(slots);
  if (ftruncate(fd_, off_t(size_)) != 0)
    throw Error(std::string("flight recorder: ftruncate: ") + std::strerror(errno));
  map_ = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map_ == MAP_FAILED) throw Error(std::string("flight recorder: mmap: ") + std::strerror(errno));
  auto* h = static_cast<FileHeader*>(map_);
  std::memcpy(h->magic, kMagic, 8);
  h->version = kVersion;
  h->regions = uint32_t(regions);
  h->slots = slots;
  for (int i = 0; i < regions; ++i) region_at(map_, slots, i)->rank = -1;
}

FlightFile::~FlightFile() {
  if (map_ && map_ != MAP_FAILED) munmap(map_, size_);
  if (fd_ >= 0) ::close(fd_);
}

std::string FlightFile::path() const { return "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd_); }

std::vector<RankFlight> FlightFile::read() const {
  const auto* h = static_cast<const FileHeader*>(map_);
  std::vector<RankFlight> out;
  for (uint32_t i = 0; i < h->regions; ++i) {
    const auto* r = region_at(map_, h->slots, int(i));
    if (__atomic_load_n(&r->rank, __ATOMIC_ACQUIRE) >= 0) out.push_back(read_region(r, h->slots));
  }
  return out;
}

std::vector<RankFlight> read_flight_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError(path + ": " + std::strerror(errno));
  struct stat st {};
  fstat(fd, &st);
  const size_t size = size_t(st.st_size);
  void* base = size ? mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (base == MAP_FAILED) throw ConfigError(path + ": cannot map it");
  std::vector<RankFlight> out;
  try {
    const FileHeader* h = check_header(base, size, path);
    for (uint32_t i = 0; i < h->regions; ++i) {
      const auto* r = region_at(base, h->slots, int(i));
      if (r->rank >= 0) out.push_back(read_region(r, h->slots));
    }
  } catch (...) {
    munmap(base, size);
    throw;
  }
  munmap(base, size);
  return out;
}

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() > 1 ? "ranks " : "rank ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string in_group(const std::string& g) { return g == "world" ? "" : " of group " + g; }

}  // namespace

std::string first_mismatch(const std::vector<RankFlight>& ranks) {
  // Groups in a stable order: the world first.
  std::set<std::string> groups;
  for (const auto& r : ranks)
    for (const auto& e : r.entries)
      if (e.peer < 0) groups.insert(e.group);
  std::vector<std::string> order;
  if (groups.count("world")) order.push_back("world");
  for (const auto& g : groups)
    if (g != "world") order.push_back(g);

  for (const auto& g : order) {
    // seq -> entry, per member rank. The world's members are every rank; a subgroup's, those
    // that recorded it.
    std::map<int, std::map<uint64_t, const FlightEntry*>> by_rank;
    for (const auto& r : ranks) {
      auto& mine = by_rank[r.rank];
      for (const auto& e : r.entries)
        if (e.peer < 0 && e.group == g) mine[e.seq] = &e;
      if (mine.empty() && g != "world") by_rank.erase(r.rank);
    }
    uint64_t from = 1;
    std::set<uint64_t> recorded;  // only numbers someone recorded can disagree
    for (const auto& [rank, seqs] : by_rank) {
      if (seqs.empty()) continue;
      from = std::max(from, seqs.begin()->first);  // older ones may have left some ring
      for (const auto& kv : seqs) recorded.insert(kv.first);
    }
    // Not every number from `from` on: a ring read from a crashed rank's memory, or another
    // node's report, may hold any sequence numbers (the fuzzer sent 1 and 2^64-1).
    for (auto it = recorded.lower_bound(from); it != recorded.end(); ++it) {
      const uint64_t s = *it;
      std::map<std::string, std::vector<int>> ops;
      std::vector<int> missing;
      for (const auto& [rank, seqs] : by_rank) {
        auto it = seqs.find(s);
        if (it != seqs.end())
          ops[it->second->op].push_back(rank);
        else if (seqs.empty() || seqs.rbegin()->first < s)
          missing.push_back(rank);
      }
      const std::string num = " #" + std::to_string(s) + in_group(g);
      if (ops.size() > 1) {
        auto majority = std::max_element(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
          return a.second.size() < b.second.size();
        });
        for (const auto& [op, who] : ops)
          if (op != majority->first)
            return rank_list(who) + " in " + op + num + " while the others are in " + majority->first + num;
      }
      if (!missing.empty() && !ops.empty()) {
        std::vector<int> did;
        for (const auto& [op, who] : ops) did.insert(did.end(), who.begin(), who.end());
        std::sort(did.begin(), did.end());
        return rank_list(missing) + " never entered " + ops.begin()->first + num + " (" + rank_list(did) + " did)";
      }
    }
  }
  return "";
}

bool any_unfinished(const std::vector<RankFlight>& ranks) {
  for (const auto& r : ranks)
    if (!r.entries.empty() && r.entries.back().state != FlightState::Completed) return true;
  return false;
}

std::string describe_flights(const std::vector<RankFlight>& input, const std::vector<std::string>& notes) {
  std::vector<RankFlight> ranks = input;
  std::sort(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  bool any = false;
  for (const auto& r : ranks) any = any || !r.entries.empty();
  if (!any) return "";
  std::ostringstream out;
  out << "flight recorder (the last collective of each rank):\n";
  for (const auto& r : ranks) {
    out << "  rank " << r.rank << ": ";
    const FlightEntry* last = nullptr;
    for (auto it = r.entries.rbegin(); it != r.entries.rend() && !last; ++it)
      if (it->peer < 0) last = &*it;
    if (!last && !r.entries.empty()) last = &r.entries.back();
    if (!last) {
      out << "no collective recorded\n";
      continue;
    }
    std::time_t secs = std::time_t(last->start_us / 1000000);
    std::tm tm{};
    localtime_r(&secs, &tm);
    char when[32];
    std::strftime(when, sizeof when, "%H:%M:%S", &tm);
    char frac[8];
    std::snprintf(frac, sizeof frac, ".%03d", int((last->start_us / 1000) % 1000));
    out << last->op;
    if (last->peer >= 0) out << " (peer " << last->peer << ")";
    out << " #" << last->seq << " (" << last->group << ", " << last->bytes << " B";
    if (!last->dtype.empty()) out << " " << last->dtype;
    out << ") started " << when << frac << ", "
        << (last->state == FlightState::Started  ? "never finished"
            : last->state == FlightState::Failed ? "failed"
                                                 : "completed");
    if (!last->origin.empty()) out << " at " << last->origin;
    out << "\n";
  }
  for (const auto& note : notes) out << "  " << note << "\n";
  std::string mismatch = first_mismatch(ranks);
  if (!mismatch.empty()) out << "  first mismatch: " << mismatch << "\n";
  return out.str();
}

}  // namespace distrun
