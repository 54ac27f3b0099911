#include "results/hang.hpp"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.hpp"
#include "results/run_file.hpp"

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
  if (site.dim.empty()) site.dim = h.call.group.substr(0, h.call.group.find('#'));  // "pp#1" -> pp
  std::string record = hang_record_path(site);
  std::fprintf(stderr,
               "meshbench: rank %d (%s): %s of %llu B in group %s (dim %s) has not completed after %.1f s "
               "(--op-timeout %g) at %s; flight recorder: %s; aborting the job (exit 3)\n",
               site.rank, site.host.c_str(), h.call.op.c_str(), static_cast<unsigned long long>(h.call.bytes),
               h.call.group.c_str(), site.dim.c_str(), h.waited_s, site.op_timeout, h.context.c_str(), record.c_str());
  std::fflush(stderr);

  nlohmann::ordered_json j = {{"rank", site.rank}, {"host", site.host}, {"binary", site.binary},
                              {"run_id", site.run_id}, {"op_timeout_s", site.op_timeout},
                              {"waited_s", h.waited_s}, {"context", h.context}, {"dim", site.dim}};
  j["pending"] = {{"seq", h.call.seq}, {"op", h.call.op}, {"bytes", h.call.bytes}, {"group", h.call.group}};
  auto& calls = j["calls"] = nlohmann::ordered_json::array();
  for (const auto& c : h.recent)
    calls.push_back({{"seq", c.seq}, {"op", c.op}, {"bytes", c.bytes}, {"group", c.group}, {"state", state_name(c.state)}});
  std::ofstream(record) << j.dump(1) << "\n";

  // One rank marks the file: whoever creates the lock first (every live rank may fire).
  if (!site.output.empty()) {
    std::string lock = site.output + ".hang-lock";
    int fd = ::open(lock.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd >= 0) {
      ::close(fd);
      if (!results::mark_status_alone(site.output, site.run_id, "hung"))
        std::fprintf(stderr, "meshbench: rank %d: could not set status 'hung' in %s\n", site.rank, site.output.c_str());
      std::remove(lock.c_str());
    } else {
      ::sleep(5);  // let the marking rank finish before this abort brings the job down
    }
  }
  std::fflush(nullptr);
  // End the whole job through MPI: the launcher exits with this code whatever state the other
  // ranks are in. (An _Exit left it to mpiexec, which ORs the raw wait statuses of the ranks it
  // then kills, so a stopped rank's SIGKILL made the job's code 9, or 1, depending on timing.)
  // Should MPI_Abort block behind the stuck call, a timer ends this process anyway and leaves
  // RECORD.abort-blocked behind, the evidence the hang tests look for (and must not find).
  constexpr int kCode = static_cast<int>(core::ExitCode::kRuntime);
  std::thread([blocked = record + ".abort-blocked"] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::ofstream(blocked) << "MPI_Abort did not end the job within 10 s\n";
    std::_Exit(kCode);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, kCode);
  std::_Exit(kCode);
}

}  // namespace meshbench::results
