// libFuzzer target: the texts distrun agents exchange through the rendezvous store
// (launcher/rendezvous_messages.*, launcher/flight_report.*): the failure record, a node's
// entry, the plan node 0 publishes, a node's flight report. The first byte picks the parser
// (its value modulo 4: 0 record, 1 entry, 2 plan, 3 flight report; for a plan, the node count
// is 1 + (byte / 4) % 8, so 'b', 'f' and 'j' are plans of 1, 2 and 3 nodes); the rest is the
// text. Any input must decode or be a MalformedMessage (no other exception, crash, hang
// or leak), and whatever decodes must come back the same through its encoder.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "flight_report.hpp"
#include "rendezvous_messages.hpp"

using namespace distrun;
using namespace distrun::launcher;

namespace {

bool same(const FailureRecord& a, const FailureRecord& b) {
  return a.final == b.final && a.host == b.host && a.node_rank == b.node_rank && a.rank == b.rank && a.cause == b.cause;
}

bool same(const PlanText& a, const PlanText& b) {
  return a.refused == b.refused && a.message == b.message && a.port == b.port && a.salt == b.salt &&
         a.nproc == b.nproc && a.hosts == b.hosts;
}

// What a decoded record may hold: no control characters (decode shows them as \xNN, so that a
// record from another node cannot drive the terminal), line breaks and tabs in the cause only.
bool printable(const std::string& s, bool lines) {
  for (unsigned char c : s)
    if (!((c >= 0x20 && c != 0x7f) || (lines && (c == '\n' || c == '\t')))) return false;
  return true;
}

void failure_record(const std::string& text) {
  FailureRecord r;
  try {
    r = FailureRecord::decode(text);
  } catch (const MalformedMessage&) {
    // A record this version could have written decodes to what it was made from, unless it
    // holds control characters, which come back escaped.
    FailureRecord made{text.size() % 2 == 1, text.substr(0, text.size() / 3), int(text.size() % 7),
                       int(text.size() % 5) - 1, text.substr(text.size() / 3)};
    FailureRecord back = FailureRecord::decode(made.encode());
    if (printable(made.host, false) && printable(made.cause, true) && !same(made, back)) std::abort();
    if (!printable(back.host, false) || !printable(back.cause, true)) std::abort();
    return;
  }
  if (r.node_rank < -1 || r.rank < -1 || !printable(r.host, false) || !printable(r.cause, true)) std::abort();
  if (!same(FailureRecord::decode(r.encode()), r)) std::abort();
}

void node_entry(const std::string& text) {
  NodeEntry e;
  try {
    e = NodeEntry::decode(text);
  } catch (const MalformedMessage&) {
    return;
  }
  if (e.nproc < 1 || e.host.empty()) std::abort();
  NodeEntry back = NodeEntry::decode(e.encode());
  if (back.nproc != e.nproc || back.results_given != e.results_given || back.host != e.host) std::abort();
}

void plan(const std::string& text, int nnodes) {
  PlanText p;
  try {
    p = parse_plan(text, nnodes);
  } catch (const MalformedMessage&) {
    return;
  }
  if (p.refused) return;
  if (p.nproc.size() != size_t(nnodes) || p.hosts.size() != size_t(nnodes) || p.port == 0 || p.salt.empty())
    std::abort();
  int64_t world = 0;
  for (int n : p.nproc) world += n;
  if (world < nnodes || world > kMaxWorld) std::abort();
  if (!same(parse_plan(p.encode(), nnodes), p)) std::abort();
}

void flight_report(const std::string& text) {
  FlightReport r;
  try {
    r = decode_flight_report(text);
  } catch (const MalformedMessage&) {
    return;
  }
  // What decodes stays within the bounds, encodes again within the size bound, and the
  // table made of it (every rank on one node, none missing) does not fail.
  if (r.left_out < 0) std::abort();
  for (const auto& rank : r.ranks)
    if (rank.rank < 0 || rank.entries.size() > FlightRecorder::kDefaultSlots) std::abort();
  std::string again = encode_flight_report(r.ranks);
  if (again.size() > kMaxFlightReport && !r.ranks.empty()) std::abort();
  FlightReport back = decode_flight_report(again);
  if (back.ranks.size() + size_t(back.left_out) != r.ranks.size()) std::abort();
  describe_job_flights({NodeFlights{0, "h", 0, int(kMaxWorld), r}, NodeFlights{1, "g", 0, 0, std::nullopt}});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (pick % 4) {
    case 0: failure_record(text); break;
    case 1: node_entry(text); break;
    case 2: plan(text, 1 + (pick / 4) % 8); break;
    default: flight_report(text); break;
  }
  return 0;
}
