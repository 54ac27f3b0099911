// Clock offsets between ranks: this rank's steady clock against rank 0's, estimated with
// ping-pong rounds (the round with the shortest round trip wins, as NTP and ReproMPI do).
// The error bound is half that round trip. Not here: drift correction or scheduling.
#pragma once

#include <mpi.h>

namespace meshbench::comm {

struct ClockOffset {
  double offset_s = 0;  // add to this rank's core::now_seconds() to get rank 0's clock
  double error_s = 0;   // half the best round trip: |true offset - offset_s| <= error_s
};

// Collective over `comm`. Rank 0 gets {0, 0}.
ClockOffset estimate_clock_offset(MPI_Comm comm, int rounds);

}  // namespace meshbench::comm
