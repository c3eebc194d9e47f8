#include "distrun/core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace distrun {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto existing = spdlog::get("distrun");
    return existing ? existing : spdlog::stderr_color_mt("distrun");
  }();
  return *logger;
}

}  // namespace distrun
