#include "results/stop_signal.hpp"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "core/op_watch.hpp"
#include "core/timer.hpp"
#include "results/run_file.hpp"

namespace meshbench::results {
namespace {

std::atomic<int> g_signal{0};
std::atomic<int> g_stage{0};  // 0 running, 1 finishing, 2 done

struct Site {
  std::mutex mu;
  int rank = 0;
  std::string host, binary, output, run_id;
};
Site& site() {
  static Site s;
  return s;
}

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
  std::signal(sig, SIG_DFL);  // a second one ends the process at once
}

void watch_signals() {
  using namespace std::chrono_literals;
  while (g_signal.load() == 0) std::this_thread::sleep_for(50ms);
  const double t0 = core::now_seconds();
  const double grace = stop_grace_s();
  for (;;) {
    std::this_thread::sleep_for(50ms);
    const int stage = g_stage.load();
    const double waited = core::now_seconds() - t0;
    if (stage == 2) return;
    if (stage == 0 && waited < grace) continue;
    if (stage == 1 && waited < 2 * grace) continue;
    std::string output, run_id, host, binary;
    int rank = 0;
    {
      std::lock_guard<std::mutex> lock(site().mu);
      output = site().output;
      run_id = site().run_id;
      host = site().host;
      binary = site().binary;
      rank = site().rank;
    }
    const std::string phase = core::phase_now();
    std::fprintf(stderr,
                 "%s: rank %d (%s): %s received, but the run did not %s within %.0f s (stuck in %s); %s"
                 "ending the job (exit 3)\n",
                 binary.c_str(), rank, host.c_str(), signal_word(g_signal.load()),
                 stage == 0 ? "reach its next step or size" : "finish writing its end", waited, phase.c_str(),
                 stage == 0 && !output.empty() ? "status 'killed', " : "");
    std::fflush(stderr);
    if (stage == 0 && !output.empty() && !run_id.empty()) mark_status_once(rank, output, run_id, "killed");
    abort_job("");
  }
}

}  // namespace

double stop_grace_s() {
  const char* v = std::getenv("MESHBENCH_STOP_GRACE");
  if (!v) return kStopGraceS;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  return end != v && *end == 0 && s > 0 && s < 1e6 ? s : kStopGraceS;
}

const char* signal_word(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
  }
  return "a signal";
}

void install_stop_signals(int rank, const std::string& host, const std::string& binary) {
  static std::once_flag once;
  std::call_once(once, [&] {
    {
      std::lock_guard<std::mutex> lock(site().mu);
      site().rank = rank;
      site().host = host;
      site().binary = binary;
    }
    std::signal(SIGTERM, on_stop_signal);
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGHUP, on_stop_signal);
    std::thread(watch_signals).detach();
  });
}

int stop_signal() { return g_signal.load(); }

void set_stop_site(const std::string& output, const std::string& run_id) {
  std::lock_guard<std::mutex> lock(site().mu);
  site().output = output;
  site().run_id = run_id;
}

void stop_finishing() {
  int running = 0;
  g_stage.compare_exchange_strong(running, 1);
}
void stop_done() { g_stage.store(2); }

void mark_status_once(int rank, const std::string& output, const std::string& run_id, const std::string& status) {
  const std::string lock = output + ".hang-lock";
  int fd = ::open(lock.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd >= 0) {
    ::close(fd);
    if (!mark_status_alone(output, run_id, status))
      std::fprintf(stderr, "meshbench: rank %d: could not set status '%s' in %s\n", rank, status.c_str(), output.c_str());
    std::remove(lock.c_str());
  } else {
    ::sleep(5);  // let the marking rank finish before this abort brings the job down
  }
}

void abort_job(const std::string& evidence) {
  std::fflush(nullptr);
  // End the whole job through MPI: the launcher exits with this code whatever state the other
  // ranks are in. (An _Exit left it to mpiexec, which ORs the raw wait statuses of the ranks it
  // then kills, so a stopped rank's SIGKILL made the job's code 9, or 1, depending on timing.)
  constexpr int kCode = static_cast<int>(core::ExitCode::kRuntime);
  std::thread([evidence] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    if (!evidence.empty()) std::ofstream(evidence) << "MPI_Abort did not end the job within 10 s\n";
    std::_Exit(kCode);
  }).detach();
  core::drain_before_abort();
  MPI_Abort(MPI_COMM_WORLD, kCode);
  std::_Exit(kCode);
}

}  // namespace meshbench::results
