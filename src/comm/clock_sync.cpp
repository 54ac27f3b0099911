#include "comm/clock_sync.hpp"

#include <limits>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace meshbench::comm {

ClockOffset estimate_clock_offset(MPI_Comm comm, int rounds) {
  int rank = 0, size = 1;
  MB_CHECK_MPI(MPI_Comm_rank(comm, &rank), "clock-sync");
  MB_CHECK_MPI(MPI_Comm_size(comm, &size), "clock-sync");
  ClockOffset best;
  constexpr int kTag = 7311;
  // Rank 0 answers every other rank in turn: t_root is read between the two messages.
  for (int peer = 1; peer < size; ++peer) {
    if (rank == 0) {
      for (int i = 0; i < rounds; ++i) {
        double dummy = 0;
        MB_CHECK_MPI(MPI_Recv(&dummy, 1, MPI_DOUBLE, peer, kTag, comm, MPI_STATUS_IGNORE), "clock-sync");
        const double t_root = core::now_seconds();
        MB_CHECK_MPI(MPI_Send(&t_root, 1, MPI_DOUBLE, peer, kTag, comm), "clock-sync");
      }
    } else if (rank == peer) {
      double best_rtt = std::numeric_limits<double>::infinity();
      for (int i = 0; i < rounds; ++i) {
        const double t0 = core::now_seconds(), ping = t0;
        MB_CHECK_MPI(MPI_Send(&ping, 1, MPI_DOUBLE, 0, kTag, comm), "clock-sync");
        double t_root = 0;
        MB_CHECK_MPI(MPI_Recv(&t_root, 1, MPI_DOUBLE, 0, kTag, comm, MPI_STATUS_IGNORE), "clock-sync");
        const double t1 = core::now_seconds(), rtt = t1 - t0;
        if (rtt < best_rtt) {
          best_rtt = rtt;
          best.offset_s = t_root - (t0 + t1) / 2;
          best.error_s = rtt / 2;
        }
      }
    }
  }
  return best;
}

}  // namespace meshbench::comm
