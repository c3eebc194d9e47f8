#include "failure_report.hpp"

#include "distrun/core/error.hpp"

#include <algorithm>
#include <memory>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "signal_names.hpp"

namespace distrun::launcher {
namespace {

constexpr size_t kMaxErrorFile = 1 << 20;  // torch's error files are a few KiB
constexpr size_t kMaxTracebackLines = 40;

std::string iso_time(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  char frac[8];
  std::snprintf(frac, sizeof frac, ".%03d", int(ms));
  return std::string(buf) + frac;
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

std::string as_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_number()) return j.dump();
  return "";
}

std::string indent(const std::string& text, size_t max_lines) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    lines.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  std::string out;
  size_t skip = lines.size() > max_lines ? lines.size() - max_lines : 0;
  if (skip) out += "    ... (" + std::to_string(skip) + " lines)\n";
  for (size_t i = skip; i < lines.size(); ++i) out += "    " + lines[i] + "\n";
  return out;
}

}  // namespace

std::optional<RecordedError> read_error_file(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxErrorFile + 1, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  if (text.size() > kMaxErrorFile) return std::nullopt;
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message")) return std::nullopt;
  RecordedError e;
  const auto& m = j["message"];
  if (m.is_object()) {
    // @record: {"message": {"message": "Type: text", "extraInfo": {"py_callstack": ..., "timestamp": ...}}}
    e.message = m.contains("message") ? as_text(m["message"]) : "";
    if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
      const auto& x = m["extraInfo"];
      if (x.contains("py_callstack")) e.traceback = as_text(x["py_callstack"]);
      if (x.contains("timestamp")) e.timestamp = as_text(x["timestamp"]);
    }
  } else {
    e.message = as_text(m);  // c10's plain form
  }
  if (e.message.empty() && e.traceback.empty()) return std::nullopt;
  return e;
}

std::string program_name(const std::vector<std::string>& argv) {
  if (argv.empty()) return "";
  if (base_name(argv[0]).rfind("python", 0) != 0) return argv[0];
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-m" && i + 1 < argv.size()) return "-m " + argv[i + 1];
    if (a == "-c") return argv[0] + " -c ...";
    if (a == "-W" || a == "-X" || a == "--check-hash-based-pycs") {
      ++i;  // options that take a value
      continue;
    }
    if (!a.empty() && a[0] != '-') return a;
  }
  return argv[0];
}

std::string format_failure(const WorkerFailure& f, const std::string& host, const std::string& flights) {
  std::string out = "worker failed: " + f.program + "\n";
  out += "  host       : " + host + "\n";
  out += "  rank       : " + std::to_string(f.rank) + " (local_rank " + std::to_string(f.local_rank) + ")\n";
  out += "  ended with : " + describe_wait_status(f.wait_status) +
         (f.pid > 0 ? " (pid " + std::to_string(f.pid) + ")" : "") + "\n";
  out += "  time       : " + iso_time(f.when) + "\n";
  if (!f.interpreter.empty()) out += "  python     : " + f.interpreter + "\n";
  const auto recorded = read_error_file(f.error_file);
  out += "  error file : " + (recorded ? f.error_file : std::string("(none written)")) + "\n";
  if (const auto& e = recorded) {
    // The root cause the worker recorded itself: it stays here whatever it printed afterwards.
    out += "  error      : " + e->message + "\n";
    if (!e->timestamp.empty()) {
      char* end = nullptr;
      long long secs = std::strtoll(e->timestamp.c_str(), &end, 10);
      out += "  raised at  : " +
             (end && *end == '\0' ? iso_time(std::chrono::system_clock::time_point(std::chrono::seconds(secs)))
                                  : e->timestamp) +
             "\n";
    }
    if (!e->traceback.empty())
      out += "  traceback (as the worker recorded it):\n" + indent(e->traceback, kMaxTracebackLines);
  } else if (f.stderr_tail.empty()) {
    out += "  stderr     : (empty)\n";
  } else {
    out += "  stderr (last " + std::to_string(f.stderr_tail.size()) + " lines):\n";
    for (auto& line : f.stderr_tail) out += "    " + line + "\n";
  }
  return out + flights;
}

namespace {
std::unique_ptr<FlightFile>& the_flight_file() {
  static std::unique_ptr<FlightFile> file;
  return file;
}
}  // namespace

FlightFile& flight_file(int local_ranks) {
  auto& file = the_flight_file();
  if (!file) file = std::make_unique<FlightFile>(std::max(local_ranks, 1));
  return *file;
}

const FlightFile* made_flight_file() { return the_flight_file().get(); }

std::string flight_recorder_path(int local_ranks) {
  static bool warned = false;
  try {
    return flight_file(local_ranks).path();
  } catch (const Error& e) {
    if (!warned) std::cerr << "distrun: warning: no flight recorder for this job: " << e.what() << std::endl;
    warned = true;
    return "";
  }
}

std::string format_interrupted(int signal, const std::vector<WorkerEnd>& ends, const std::string& host,
                               const std::string& program) {
  std::string out = "stopped by " + signal_abbrev(signal) + " (forwarded to the workers): " + program + "\n";
  out += "  host       : " + host + "\n";
  for (const auto& e : ends)
    out += "  rank " + std::to_string(e.rank) + "     : " + describe_wait_status(e.wait_status) + "\n";
  return out;
}

void write_agent_error_file(const std::string& message, const std::string& details,
                            const std::optional<RecordedError>& worker_error, int exit_code) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!path || !*path) return;
  nlohmann::json info;
  if (worker_error) {
    info["message"] = worker_error->message;
    info["extraInfo"] = {{"py_callstack", worker_error->traceback}, {"timestamp", worker_error->timestamp}};
  } else {
    info["message"] = message;
    info["extraInfo"] = {{"py_callstack", details}, {"timestamp", std::to_string(std::time(nullptr))}};
  }
  info["errorCode"] = exit_code;
  std::ofstream out(path, std::ios::trunc);
  out << nlohmann::json{{"message", info}}.dump() << "\n";
  out.flush();
  if (!out) std::cerr << "distrun: error: cannot write TORCHELASTIC_ERROR_FILE " << path << std::endl;
}

}  // namespace distrun::launcher
