// Clock offsets between ranks: how far this rank's monotonic clock (core::now_seconds) is
// ahead of rank 0's, estimated by ping-pong rounds in the manner of SKaMPI and ReproMPI
// (Hunold and Carpen-Amarie, "MPI benchmarking revisited", 2016). Each non-root rank in turn
// sends a ping, rank 0 answers with its clock reading, and the round with the shortest
// round trip gives the estimate: offset = (t_send + t_recv) / 2 - t_root, with error
// half that round trip (rank 0 read its clock somewhere inside it). Used by the collective
// driver's window timing and by trace alignment. Not here: drift models or a global clock
// object; callers re-estimate when they need drift.
#pragma once

#include <mpi.h>

namespace meshbench::comm {

struct ClockOffset {
  double offset_s = 0;  // this rank's clock minus rank 0's: global time = local time - offset_s
  double error_s = 0;   // bound on |estimate - true offset| (half the best round trip)
};

// Collective over `comm`; `rounds` ping-pongs per rank (>= 1). Rank 0 of comm gets {0, 0}.
ClockOffset estimate_clock_offset(MPI_Comm comm, int rounds);

// The same with another clock (seconds), for tests that shift a rank's clock on purpose.
ClockOffset estimate_clock_offset(MPI_Comm comm, int rounds, double (*clock)());

}  // namespace meshbench::comm
