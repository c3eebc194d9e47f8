#include "job_secret.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "distrun/core/error.hpp"
#include "distrun/store/auth.hpp"

namespace distrun::launcher {
namespace {

constexpr size_t kMaxSecret = 4096;

std::string read_secret_file(const std::string& path) {
  const std::string where = "--rdzv-secret-file " + path;
  struct stat named {};
  if (lstat(path.c_str(), &named) == 0 && !S_ISREG(named.st_mode)) throw ConfigError(where + ": not a regular file");
  // O_NOFOLLOW: the file checked is the file read, not whatever a link points to later;
  // O_NONBLOCK: a FIFO swapped in meanwhile opens at once, and fstat refuses it.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) throw ConfigError(where + ": " + strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    throw ConfigError(where + ": not a regular file");
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    throw ConfigError(where + ": mode " + mode + (st.st_uid != geteuid() ? ", owned by another user" : "") +
                      "; the secret must be readable by you only (chown to you, then chmod 600 " + path + ")");
  }
  if (size_t(st.st_size) > kMaxSecret) {
    close(fd);
    throw ConfigError(where + ": larger than 4 KiB; a secret is a short line");
  }
  std::string text(kMaxSecret, '\0');
  ssize_t n;
  do n = read(fd, text.data(), text.size());
  while (n < 0 && errno == EINTR);
  close(fd);
  if (n < 0) throw ConfigError(where + ": " + strerror(errno));
  text.resize(size_t(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.empty()) throw ConfigError(where + ": the file is empty");
  return text;
}

}  // namespace

std::optional<std::string> load_job_secret(const std::string& secret_file, const EnvLookup& env) {
  if (!secret_file.empty()) return read_secret_file(secret_file);
  auto v = env("DISTRUN_STORE_SECRET");
  if (v && !v->empty()) return *v;
  return std::nullopt;
}

void check_secret_strength(const std::string& secret, const std::string& from) {
  const double bits = auth::estimated_entropy_bits(secret);
  if (bits >= kMinSecretBits) return;
  throw ConfigError(from + " looks too weak for a job secret (about " + std::to_string(int(bits)) +
                    " bits of entropy; at least " + std::to_string(int(kMinSecretBits)) +
                    " needed, since a recorded handshake can be guessed at offline): make one with\n"
                    "    export DISTRUN_STORE_SECRET=$(openssl rand -hex 16)\n"
                    "  or $(head -c 32 /dev/urandom | base64)");
}

std::string missing_secret_message() {
  return "several nodes need a job secret, so that no one else can join the rendezvous or read the "
         "workers' port and secret: set the same DISTRUN_STORE_SECRET on every node, e.g.\n"
         "    export DISTRUN_STORE_SECRET=$(head -c 32 /dev/urandom | base64)\n"
         "  (or give --rdzv-secret-file PATH, a file of mode 0600 holding it; scripts/slurm/distrun.sbatch makes one "
         "per job)";
}

}  // namespace distrun::launcher
