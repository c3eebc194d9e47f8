// The library's logger: "distrun", on stderr (stdout carries results, which log lines must not
// interleave with). Its level follows spdlog::set_level.
#pragma once
#include <spdlog/spdlog.h>

namespace distrun {

/// The "distrun" logger, created on first use (thread-safe).
spdlog::logger& log();

}  // namespace distrun
