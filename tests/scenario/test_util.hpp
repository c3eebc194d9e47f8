// Helpers for the scenario unit tests: scenario text in, loaded scenario or error out.
#pragma once
#include <catch2/catch.hpp>

#include <string>

#include "distrun/core/error.hpp"
#include "distrun/scenario/load/loader.hpp"
#include "distrun/scenario/run/api.hpp"

namespace distrun::scenario::testing {

/// The ConfigError message loading `text` (named "t.yaml") raises, or "" when it loads.
inline std::string load_error(const std::string& text) {
  try {
    load_scenario_text("t.yaml", text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace distrun::scenario::testing
