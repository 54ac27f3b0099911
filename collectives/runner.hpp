// One size of one collective, start to finish: the verified cold call, the warm-up (a fixed
// number of calls, or adaptive until the time per call is stable), the timed loop (at least
// -n iterations and, unless -n was given, at least --min-time seconds of calls), and the
// statistics over every rank of the world. Split from driver.cpp, which owns the sweep,
// options, groups and reporters. Timing never includes verification or initialisation.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "comm/clock_sync.hpp"
#include "comm/communicator.hpp"
#include "core/op_watch.hpp"
#include "compute/device.hpp"
#include "groups.hpp"
#include "options.hpp"
#include "results/record.hpp"
#include "spec.hpp"

namespace meshbench::collectives {

struct Buffers {
  compute::Buffer send, recv;
  std::vector<std::byte> host_in, host_out;
};

// nccl-tests' timing of a device collective (--timing stream and graph): `count` calls queued
// back to back on the communicator's stream between two events (marks 0 and 1 of `t`), after
// one barrier; with `graph` the calls are first captured once (untimed) and the capture is
// launched between the events. Appends `count` samples, each the interval / count (the mean
// per call nccl-tests reports), and returns count. No host work, barrier or event sits
// between the calls, so neither launch latency nor the peers' barrier skew is in the time.
int time_back_to_back(comm::Communicator& c, comm::Timer& t, int count, bool graph, const std::function<void()>& call,
                      std::vector<double>& out);

class Runner {
 public:
  // `watch` (may be null) sees the calls the runner makes outside `comm` (MPI on the world,
  // timer waits) and a context string per phase.
  Runner(const Spec& spec, const Options& opt, comm::Communicator& comm, MPI_Comm world, const GroupPlan& plan,
         core::OpWatch* watch);
  // `where` names the point for the watchdog's message ("size 3 of 12, 64 B, float sum").
  results::PointResult measure(const Inputs& in, results::Placement placement, Buffers& b, const std::string& where);
  // --timing window: this rank's clock against world rank 0's, and the largest error of any rank.
  void set_clock(comm::ClockOffset mine, double max_error_s) {
    clock_ = mine;
    max_clock_error_ = max_error_s;
  }

 private:
  // `count` calls in the --timing mode, their times appended to `out` (window: only the calls
  // every rank started on time; the rest are counted in invalid_). Returns the calls kept.
  int run_calls(const Views& v, const Inputs& in, int count, std::vector<double>& out);
  // One call after a barrier, timed on `t` (marks 0 and 1): seconds.
  double isolated_call(comm::Timer& t, const Views& v, const Inputs& in);
  int run_window(const Views& v, const Inputs& in, int count, std::vector<double>& out);
  // Adaptive or fixed warm-up; fills r.warmup_calls and r.warmup_converged.
  void warm_up(const Views& v, const Inputs& in, results::PointResult& r);
  // The timed loop; returns this rank's time per iteration.
  std::vector<double> timed(const Views& v, const Inputs& in);
  void summarize(std::vector<double> mine, double first, std::uint64_t wrong, results::PointResult& r);
  void phase(const char* what);

  const Spec& spec_;
  const Options& opt_;
  comm::Communicator& comm_;
  MPI_Comm world_;
  const GroupPlan& plan_;
  int world_rank_ = 0, world_size_ = 1;
  std::unique_ptr<comm::Timer> timer_;
  int timer_marks_ = 0;
  core::OpWatch* watch_;
  std::string where_;
  comm::ClockOffset clock_;
  double max_clock_error_ = 0;
  double window_s_ = 0, lead_s_ = 0;  // window timing: slot per call and the lead before the first
  int invalid_ = 0;
};

}  // namespace meshbench::collectives
