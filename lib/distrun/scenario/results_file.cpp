#include "distrun/scenario/results_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "distrun/core/error.hpp"

namespace distrun::scenario {

ResultsFile::ResultsFile(const std::string& path)
    : path_(path), tmp_path_(path + ".tmp." + std::to_string(::getpid())) {
  file_ = std::fopen(tmp_path_.c_str(), "w");
  if (!file_)
    throw ConfigError("cannot write the results file '" + path + "': " + std::strerror(errno));
}

ResultsFile::~ResultsFile() {
  if (file_) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

void ResultsFile::commit(const std::vector<std::string>& lines) {
  bool ok = true;
  for (const auto& l : lines) ok = ok && std::fputs(l.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF;
  ok = std::fflush(file_) == 0 && ok;
  const int saved = errno;
  std::fclose(file_);
  file_ = nullptr;
  if (!ok || std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int e = ok ? errno : saved;
    std::remove(tmp_path_.c_str());
    throw Error("cannot write the results file '" + path_ + "': " + std::strerror(e));
  }
}

}  // namespace distrun::scenario
