#include "log_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "distrun/core/error.hpp"
#include "ports.hpp"

namespace distrun::launcher {
namespace {

// mkdir at `dir_fd`/`name` unless it exists as a real folder; returns an fd opened without
// following a symlink (an attacker's link in place of our folder is refused, not followed).
int open_subdir(int dir_fd, const std::string& name, const std::string& shown) {
  if (mkdirat(dir_fd, name.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error("cannot create log folder " + shown + ": " + strerror(errno));
  int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open log folder " + shown + " (a symlink is never followed): " + strerror(errno));
  return fd;
}

}  // namespace

RunLogDir::RunLogDir(const std::string& log_dir, const std::string& run_id, bool remove_at_end)
    : remove_at_end_(remove_at_end) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  struct stat st {};
  if (lstat(log_dir.c_str(), &st) != 0) throw Error("cannot create log folder " + log_dir + ": " + ec.message());
  // The user's LOG_DIR: its parents are the user's business, but the folder itself must not be
  // a symlink (a link planted in a shared place would send the logs elsewhere).
  if (S_ISLNK(st.st_mode)) throw ConfigError("--log-dir " + log_dir + " is a symlink; give the real folder");
  if (!S_ISDIR(st.st_mode)) throw ConfigError("--log-dir " + log_dir + " is not a folder");
  int base = open(log_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (base < 0) throw Error("cannot open log folder " + log_dir + ": " + strerror(errno));
  for (int tries = 0; fd_ < 0; ++tries) {
    std::string name = run_id + "_" + random_hex(4);
    if (mkdirat(base, name.c_str(), 0700) == 0) {
      fd_ = openat(base, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      path_ = log_dir + (log_dir.back() == '/' ? "" : "/") + name;
      if (fd_ < 0) break;
    } else if (errno != EEXIST || tries > 100) {
      break;
    }
  }
  int e = errno;
  close(base);
  if (fd_ < 0) throw Error("cannot create a run folder in " + log_dir + ": " + strerror(e));
}

RunLogDir::~RunLogDir() {
  if (fd_ >= 0) close(fd_);
  if (remove_at_end_) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);  // remove_all never follows symlinks
  }
}

std::string RunLogDir::make_rank_dir(int attempt, int local_rank) {
  std::string attempt_name = "attempt_" + std::to_string(attempt), rank_name = std::to_string(local_rank);
  int a = open_subdir(fd_, attempt_name, path_ + "/" + attempt_name);
  std::string shown = path_ + "/" + attempt_name + "/" + rank_name;
  int r = -1;
  try {
    r = open_subdir(a, rank_name, shown);
  } catch (...) {
    close(a);
    throw;
  }
  close(r);
  close(a);
  return shown;
}

int RunLogDir::create_file(int attempt, int local_rank, const std::string& name) {
  std::string dir = make_rank_dir(attempt, local_rank);
  std::string rel = "attempt_" + std::to_string(attempt) + "/" + std::to_string(local_rank);
  int d = openat(fd_, rel.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (d < 0) throw Error("cannot open log folder " + dir + ": " + strerror(errno));
  int fd = openat(d, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  int e = errno;
  close(d);
  if (fd < 0) throw Error("cannot create log file " + dir + "/" + name + ": " + strerror(e));
  return fd;
}

}  // namespace distrun::launcher
