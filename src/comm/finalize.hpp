// MPI_Finalize with a deadline, for every meshbench binary. Results are on disk before
// MPI_Finalize; MPICH 4.0 over UCX TCP can hang inside it at 3 or more ranks (fixed upstream
// in 4.2), which would turn a finished run into a job that never ends. Past the deadline
// (MESHBENCH_FINALIZE_TIMEOUT seconds, default 10; 0 waits forever) the process exits with
// the run's own exit code, rank 0 saying why.
#pragma once

namespace meshbench::comm {

void finalize_with_deadline(int rank, int rc, const char* binary);

// The end of a run stopped by SIGTERM or SIGINT, after its results are written and every rank
// agreed: rank 0 ends the job with MPI_Abort(rc), the others finalize. When the signal went to
// mpiexec, hydra (MPICH 4.0.2) tears down its side of the job and a plain exit reached it as 0,
// or MPI_Finalize waited out its deadline; through MPI_Abort the launcher exits with rc.
void end_signalled_job(int rank, int rc, const char* binary);

}  // namespace meshbench::comm
