// MPI check of comm::estimate_clock_offset: ranks on one host share CLOCK_MONOTONIC, so the
// true offset is 0 and must lie within the stated error; a clock shifted by rank x 1.5 s
// must be found within its error. Exit 1 when either bound is broken on any rank.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "comm/clock_sync.hpp"
#include "core/timer.hpp"
#include "support/check_help.hpp"

namespace {
int g_rank = 0;
double shifted_clock() { return meshbench::core::now_seconds() + 1.5 * g_rank; }
}  // namespace

int main(int argc, char** argv) {
  if (meshbench::tests::answered_help(argc, argv,
                                      "usage: mpiexec -n 2 build/tests/clock_sync_check\n"
                                      "  checks that the clock-offset estimate holds its stated error bound (ctest mpi.clock_sync_check):\n"
                                      "  exit 0 when it does, 1 otherwise\n"))
    return 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  using meshbench::comm::estimate_clock_offset;
  int bad = 0;
  auto same = estimate_clock_offset(MPI_COMM_WORLD, 20);
  // Ranks on different hosts have unknown true offsets: check the shifted case only there.
  char host[MPI_MAX_PROCESSOR_NAME], host0[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  if (g_rank == 0) std::snprintf(host0, sizeof host0, "%s", host);
  MPI_Bcast(host0, sizeof host0, MPI_CHAR, 0, MPI_COMM_WORLD);
  bool one_host = std::string(host) == host0;
  if (one_host && !(std::fabs(same.offset_s) <= same.error_s + 1e-9)) ++bad;
  if (!(same.error_s >= 0)) ++bad;
  auto shifted = estimate_clock_offset(MPI_COMM_WORLD, 20, &shifted_clock);
  double want = 1.5 * g_rank + (one_host ? 0.0 : same.offset_s);
  double tol = shifted.error_s + (one_host ? 1e-9 : same.error_s);
  if (!(std::fabs(shifted.offset_s - want) <= tol)) ++bad;
  std::printf("rank %d: offset %.3e s +- %.3e s; shifted %.6f s +- %.3e s (want %.1f)\n", g_rank, same.offset_s,
              same.error_s, shifted.offset_s, shifted.error_s, 1.5 * g_rank);
  int total = 0;
  MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
