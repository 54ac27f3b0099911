#include "results/hang.hpp"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "comm/peer_board.hpp"
#include "core/error.hpp"
#include "results/run_file.hpp"
#include "results/stop_signal.hpp"

namespace meshbench::results {
namespace {

const char* state_name(core::CallState s) {
  return s == core::CallState::kPending ? "pending" : s == core::CallState::kDone ? "completed" : "empty";
}

}  // namespace

std::string hang_record_path(const HangSite& site) {
  std::string base = site.output.empty() ? site.binary : site.output;
  return fmt::format("{}.hang-rank{}.json", base, site.rank);
}

void report_hang(const HangSite& given, const core::Hang& h) {
  HangSite site = given;
  if (site.dim.empty() && !h.stalled) site.dim = h.call.group.substr(0, h.call.group.find('#'));  // "pp#1" -> pp
  std::string record = hang_record_path(site);
  // Which of the group's ranks hold it up (comm/peer_board.hpp): stopped, exited or never
  // arrived. The one to look at is that rank, not this one, which only waited for it.
  const comm::Absent absent = h.stalled ? comm::Absent{} : comm::absent_members(h.call.group, site.rank);
  std::string absent_line;
  if (!absent.known) {
    absent_line = "which ranks hold the group up cannot be told (its members or the host's call board are unknown)";
  } else {
    absent_line = absent.ranks.empty() ? std::string("every rank of the group on this host is alive in the call")
                                       : fmt::format("holding it up: {}", fmt::join(absent.detail, "; "));
    if (!absent.elsewhere.empty()) absent_line += "; " + absent.elsewhere;
  }
  if (h.stalled) {
    const std::string last = h.call.seq == 0 ? std::string("none yet")
                                              : fmt::format("{} in group {} ({})", h.call.op, h.call.group,
                                                            h.call.state == core::CallState::kDone ? "completed" : "pending");
    std::fprintf(stderr,
                 "meshbench: rank %d (%s): no progress in %s for %.1f s (--op-timeout %g): no GEMM finished and no "
                 "call began or ended, at %s; the last call: %s; flight recorder: %s; aborting the job (exit 3)\n",
                 site.rank, site.host.c_str(), h.phase.c_str(), h.waited_s, site.op_timeout,
                 h.context.empty() ? "set-up" : h.context.c_str(), last.c_str(), record.c_str());
  } else {
    std::fprintf(stderr,
                 "meshbench: rank %d (%s): %s of %llu B in group %s (dim %s) has not completed after %.1f s "
                 "(--op-timeout %g) at %s; %s; flight recorder: %s; aborting the job (exit 3)\n",
                 site.rank, site.host.c_str(), h.call.op.c_str(), static_cast<unsigned long long>(h.call.bytes),
                 h.call.group.c_str(), site.dim.c_str(), h.waited_s, site.op_timeout, h.context.c_str(),
                 absent_line.c_str(), record.c_str());
  }
  std::fflush(stderr);

  nlohmann::ordered_json j = {{"rank", site.rank}, {"host", site.host}, {"binary", site.binary},
                              {"run_id", site.run_id}, {"op_timeout_s", site.op_timeout},
                              {"waited_s", h.waited_s}, {"context", h.context}, {"dim", site.dim},
                              {"kind", h.stalled ? "stall" : "call"}, {"phase", h.phase}};
  if (!h.stalled) {
    j["absent_ranks"] = absent.ranks;
    j["absent"] = absent.detail;
    j["absent_elsewhere"] = absent.elsewhere;
  }
  if (!h.stalled) j["pending"] = {{"seq", h.call.seq}, {"op", h.call.op}, {"bytes", h.call.bytes}, {"group", h.call.group}};
  auto& calls = j["calls"] = nlohmann::ordered_json::array();
  for (const auto& c : h.recent)
    calls.push_back({{"seq", c.seq}, {"op", c.op}, {"bytes", c.bytes}, {"group", c.group}, {"state", state_name(c.state)}});
  std::ofstream(record) << j.dump(1) << "\n";

  // One rank marks the file: whoever creates the lock first (every live rank may fire).
  // Should MPI_Abort block behind the stuck call, a timer ends this process anyway and leaves
  // RECORD.abort-blocked behind, the evidence the hang tests look for (and must not find).
  if (!site.output.empty()) mark_status_once(site.rank, site.output, site.run_id, "hung");
  abort_job(record + ".abort-blocked");
}

}  // namespace meshbench::results
