// What a meshbench binary does when its watchdog (core::OpWatch) finds a call pending past
// --op-timeout: one line on stderr naming the rank, host, call, bytes, group and dimension,
// where in the sweep it was and how long it waited; the flight recorder as JSON in
// FILE.hang-rank<R>.json beside the output; the run's status set to `hung` (by one rank, in
// place in the file on disk); then MPI_Abort with code 3, which ends every rank and makes the
// launcher exit 3 whatever state the stuck rank is in.
#pragma once

#include <string>

#include "core/op_watch.hpp"

namespace meshbench::results {

struct HangSite {
  int rank = 0;
  std::string host, binary, dim;  // dim empty: the pending call's group names it ("pp#1" -> pp)
  double op_timeout = 0;
  std::string output, run_id;  // output empty: no HDF5 file
};

// The path of rank R's flight-recorder file for `output` (or for the binary without one).
std::string hang_record_path(const HangSite& site);

// Called on the watchdog thread; does not return.
[[noreturn]] void report_hang(const HangSite& site, const core::Hang& h);

}  // namespace meshbench::results
