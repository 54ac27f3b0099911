#include "finalize.hpp"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.hpp"

namespace meshbench::comm {

void finalize_with_deadline(int rank, int rc, const char* binary) {
  double limit = 10;
  if (const char* v = std::getenv("MESHBENCH_FINALIZE_TIMEOUT")) limit = std::atof(v);
  static std::atomic<bool> done{false};
  if (limit > 0) {
    std::thread([limit, rank, rc, name = std::string(binary)] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
      while (std::chrono::steady_clock::now() < deadline) {
        if (done.load()) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (rank == 0)
        std::fprintf(stderr, "%s: MPI_Finalize did not return within %g s (a known MPICH 4.0 hang over TCP); "
                             "results are complete, exiting with code %d\n", name.c_str(), limit, rc);
      std::fflush(nullptr);
      std::_Exit(rc);
    }).detach();
  }
  MPI_Finalize();
  done.store(true);
}

void end_signalled_job(int rank, int rc, const char* binary) {
  std::fflush(nullptr);
  if (rank == 0) {
    core::drain_before_abort();
    MPI_Abort(MPI_COMM_WORLD, rc);
  }
  finalize_with_deadline(rank, rc, binary);
}

}  // namespace meshbench::comm
