#include "comm/clock_sync.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace meshbench::comm {

ClockOffset estimate_clock_offset(MPI_Comm comm, int rounds) {
  return estimate_clock_offset(comm, rounds, &core::now_seconds);
}

ClockOffset estimate_clock_offset(MPI_Comm comm, int rounds, double (*clock)()) {
  constexpr int kTag = 7311;
  int rank = 0, size = 1;
  MB_CHECK_MPI(MPI_Comm_rank(comm, &rank), "clock_sync");
  MB_CHECK_MPI(MPI_Comm_size(comm, &size), "clock_sync");
  rounds = std::max(rounds, 1);
  // A private communicator: the pings cannot match anybody else's messages.
  MPI_Comm c;
  MB_CHECK_MPI(MPI_Comm_dup(comm, &c), "clock_sync");
  ClockOffset best;
  if (rank == 0) {
    // Serve each rank in turn, so each round trip sees an idle rank 0.
    for (int peer = 1; peer < size; ++peer) {
      for (int k = 0; k < rounds; ++k) {
        char ping = 0;
        MB_CHECK_MPI(MPI_Recv(&ping, 1, MPI_CHAR, peer, kTag, c, MPI_STATUS_IGNORE), "clock_sync");
        double t_root = clock();
        MB_CHECK_MPI(MPI_Send(&t_root, 1, MPI_DOUBLE, peer, kTag, c), "clock_sync");
      }
    }
  } else {
    double best_rtt = std::numeric_limits<double>::infinity();
    for (int k = 0; k < rounds; ++k) {
      char ping = 0;
      double t_root = 0;
      double t0 = clock();
      MB_CHECK_MPI(MPI_Send(&ping, 1, MPI_CHAR, 0, kTag, c), "clock_sync");
      MB_CHECK_MPI(MPI_Recv(&t_root, 1, MPI_DOUBLE, 0, kTag, c, MPI_STATUS_IGNORE), "clock_sync");
      double t1 = clock();
      if (t1 - t0 < best_rtt) {
        best_rtt = t1 - t0;
        best = {(t0 + t1) / 2 - t_root, (t1 - t0) / 2};
      }
    }
  }
  MB_CHECK_MPI(MPI_Comm_free(&c), "clock_sync");
  return best;
}

}  // namespace meshbench::comm
