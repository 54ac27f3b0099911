// SIGTERM, SIGINT and SIGHUP for every meshbench binary (Slurm's time limit and scancel, Ctrl-C,
// a dropped ssh session). The first one asks the run to stop at its next step or size: the
// binary writes its summary and status `killed` and exits 3. A run whose main thread cannot
// get there (stuck in compute, in a call the watchdog is off for) is ended anyway: after
// kStopGraceS without reaching its end, a watcher thread marks the run `killed` in place in
// the file on disk, names the phase it was stuck in, and aborts the job with exit 3. A second
// signal takes the default action (the process ends at once). Not here: the stop decision
// itself, which each binary agrees across ranks at its step or size boundary.
#pragma once

#include <string>

namespace meshbench::results {

// Below Slurm's default KillWait (30 s between SIGTERM and SIGKILL), so a stuck run is still
// marked `killed` before SIGKILL takes it. MESHBENCH_STOP_GRACE (seconds, > 0) overrides it:
// for a site whose KillWait is shorter, and for the tests.
constexpr double kStopGraceS = 20;
double stop_grace_s();

// Installs the handlers and starts the watcher thread (once per process).
void install_stop_signals(int rank, const std::string& host, const std::string& binary);

// 0, or the first stop signal received (SIGTERM, SIGINT, SIGHUP).
int stop_signal();
const char* signal_word(int sig);  // "SIGTERM"

// The file and run the watcher marks when it must end a stuck run (empty: no file yet).
void set_stop_site(const std::string& output, const std::string& run_id);
// The run reached its end and is writing it (the summary, the last publish): the watcher
// gives it a second grace before it aborts, and marks nothing.
void stop_finishing();
// The results are written: the watcher no longer ends anything (finalize has its own deadline).
void stop_done();

// Sets `status` of run `run_id` in place in `output` on disk, from whichever rank gets there
// first (every live rank may try; a lock file elects one, the others wait for it). Used on
// the way to an abort, when the writer itself cannot publish.
void mark_status_once(int rank, const std::string& output, const std::string& run_id, const std::string& status);

// MPI_Abort(3) from any thread; should it block behind a stuck call, the process _Exits after
// 10 s and leaves `evidence` (a path; empty: none) saying so.
[[noreturn]] void abort_job(const std::string& evidence);

}  // namespace meshbench::results
