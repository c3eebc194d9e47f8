// The summary printed when a worker fails: what torchrun's ChildFailedError says, without
// its noise, and with the root cause torch's @record wrote (error.json) when there is one.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "distrun/backend/flight_recorder.hpp"
#include "worker_group.hpp"

namespace distrun::launcher {

/// What torch's @record (torch.distributed.elastic.multiprocessing.errors) left in a worker's
/// TORCHELASTIC_ERROR_FILE.
struct RecordedError {
  std::string message;    // "ValueError: ..."
  std::string traceback;  // the Python traceback, as printed
  std::string timestamp;  // seconds since the epoch, as torch writes it
};

/// Reads `path` when it exists and holds torch's error JSON (either the {"message": {...}}
/// form of @record or a plain {"message": "..."}); nullopt otherwise. Bounded: a huge file is
/// not read whole.
std::optional<RecordedError> read_error_file(const std::string& path);

/// The program as a user would name it: the script of `python [-u] script.py ...`, the module
/// of `python -m mod`, else argv[0].
std::string program_name(const std::vector<std::string>& argv);

/// Multi-line summary naming the program, host, rank, local rank, exit code or signal, time,
/// and the root cause: the recorded error when the worker wrote one, else its stderr's tail.
/// `flights`, the flight recorder's table (the last collective of each rank, the first rank out
/// of step; "" when none was left unfinished), follows.
std::string format_failure(const WorkerFailure& failure, const std::string& host, const std::string& flights = "");

/// Summary after distrun itself was stopped by `signal`: how each worker ended.
std::string format_interrupted(int signal, const std::vector<WorkerEnd>& ends, const std::string& host,
                               const std::string& program);

/// Writes the agent-level error file when distrun's own TORCHELASTIC_ERROR_FILE is set (torch's
/// format; the failed worker's recorded error when it has one, as torchrun copies it); never
/// throws: a write failure is reported on stderr.
void write_agent_error_file(const std::string& message, const std::string& details,
                            const std::optional<RecordedError>& worker_error, int exit_code);

/// This agent's flight recorder file (made on first use, for `local_ranks` workers), which
/// every worker writes its collectives to (DISTRUN_FLIGHT_RECORDER).
FlightFile& flight_file(int local_ranks);

/// The path workers get as DISTRUN_FLIGHT_RECORDER: flight_file(local_ranks)'s, or empty when
/// it cannot be made (the recorder only explains failures, so a job never fails for want of
/// it: the reason is printed once).
std::string flight_recorder_path(int local_ranks);

/// The flight file if the workers were given one, else null.
const FlightFile* made_flight_file();

}  // namespace distrun::launcher
