#include "distrun/scenario/output/results_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "distrun/core/error.hpp"
#include "distrun/scenario/model/source.hpp"

namespace distrun::scenario {

namespace {

std::string folder_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Filesystems without O_TMPFILE answer with one of these; anything else is a real error.
bool tmpfile_unsupported(int e) { return e == EOPNOTSUPP || e == EISDIR || e == EINVAL; }

}  // namespace

ResultsFile::ResultsFile(const std::string& path, const std::string& keep)
    : path_(path), tmp_path_(path + ".tmp." + std::to_string(::getpid())) {
  const auto refuse = [&](const std::string& why) {
    return ConfigError("cannot write the results file '" + path + "': " + why);
  };
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) throw refuse("it is a symbolic link (give the file it points to)");
    if (!S_ISREG(st.st_mode)) throw refuse(std::string("it is ") + file_kind(st.st_mode) + ", not a regular file");
    struct stat other {};
    if (!keep.empty() && ::stat(keep.c_str(), &other) == 0 && other.st_dev == st.st_dev && other.st_ino == st.st_ino)
      throw refuse("it is the scenario file");
  }
  int fd = ::open(folder_of(path).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (fd >= 0) {
    unnamed_ = true;
    file_ = ::fdopen(fd, "w");
    if (!file_) ::close(fd);
  } else if (tmpfile_unsupported(errno)) {
    file_ = std::fopen(tmp_path_.c_str(), "we");
  }
  if (!file_) throw ConfigError("cannot write the results file '" + path + "': " + std::strerror(errno));
}

ResultsFile::~ResultsFile() {
  if (file_) {
    std::fclose(file_);
    if (!unnamed_) std::remove(tmp_path_.c_str());
  }
}

void ResultsFile::commit(const std::vector<std::string>& lines) {
  bool ok = true;
  for (const auto& l : lines) ok = ok && std::fputs(l.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF;
  ok = std::fflush(file_) == 0 && ok;
  int error = ok ? 0 : errno;
  if (ok && unnamed_) {
    // Give the unnamed file a temporary name (linkat cannot replace an existing file), then
    // rename it over the target, which replaces it atomically.
    const std::string self = "/proc/self/fd/" + std::to_string(::fileno(file_));
    std::remove(tmp_path_.c_str());
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp_path_.c_str(), AT_SYMLINK_FOLLOW) != 0)
      ok = false, error = errno;
  }
  if (std::fclose(file_) != 0 && ok) ok = false, error = errno;
  file_ = nullptr;
  if (ok && std::rename(tmp_path_.c_str(), path_.c_str()) != 0) ok = false, error = errno;
  if (!ok) {
    std::remove(tmp_path_.c_str());
    throw Error("cannot write the results file '" + path_ + "': " + std::strerror(error));
  }
}

}  // namespace distrun::scenario
