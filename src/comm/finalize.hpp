// MPI_Finalize with a deadline, for every meshbench binary. Results are on disk before
// MPI_Finalize; MPICH 4.0 over UCX TCP can hang inside it at 3 or more ranks (fixed upstream
// in 4.2), which would turn a finished run into a job that never ends. Past the deadline
// (MESHBENCH_FINALIZE_TIMEOUT seconds, default 10; 0 waits forever) the process exits with
// the run's own exit code, rank 0 saying why.
#pragma once

namespace meshbench::comm {

void finalize_with_deadline(int rank, int rc, const char* binary);

}  // namespace meshbench::comm
