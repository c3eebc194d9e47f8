// The flight recorder across nodes. Each agent reads its own workers' rings (the flight file);
// when the job fails it publishes a compact report of them (the last few collectives of each
// local rank, bounded in size) in the rendezvous store, and every node's failure summary
// gathers the others' reports into one table of the whole job, saying which node sent none.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "distrun/backend/flight_recorder.hpp"

namespace distrun::launcher {

/// What one node's report holds.
struct FlightReport {
  std::vector<RankFlight> ranks;
  int left_out = 0;  // ranks that did not fit in the report's bound
};

/// At most this many bytes per node, and this many collectives per rank.
inline constexpr size_t kMaxFlightReport = 64 << 10;
inline constexpr size_t kFlightsPerRank = 8;

/// JSON of each rank's last collectives (fewer per rank, then fewer ranks, until it fits in
/// `max_bytes`).
std::string encode_flight_report(const std::vector<RankFlight>& ranks, size_t max_bytes = kMaxFlightReport);
/// MalformedMessage when `text` is not a report this version writes (or is beyond its bounds).
FlightReport decode_flight_report(const std::string& text);

/// One node's part of the job, with its report when one came.
struct NodeFlights {
  int node = 0;
  std::string host;
  int first_rank = 0;
  int nproc = 0;
  std::optional<FlightReport> report;
};

/// The flight recorder's table for the whole job: one line per rank of the nodes that
/// reported, "no report from node N (host H, ranks A to B)" for the others, then the first
/// mismatch; "" when no rank left a collective unfinished (nothing to explain).
std::string describe_job_flights(const std::vector<NodeFlights>& nodes);

}  // namespace distrun::launcher
