// One run in an HDF5 file: opens or creates the file on every rank (parallel HDF5), makes
// the run id unique inside it, writes the root attributes, /runs/<run_id> with the run's
// provenance and its topology/ group, and at the end the status and end time. Shared by
// every binary that writes HDF5 (the collective reporter, step_bench), so every file has
// the same skeleton. Data groups beneath the run are the caller's.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "results/h5.hpp"
#include "results/record.hpp"
#include "results/run_context.hpp"

namespace meshbench::results {

class RunFile {
 public:
  // Collective over `world`. Updates ctx.run_id (and attrs["run_id"]) when the id is taken.
  RunFile(const std::string& path, bool append, MPI_Comm world, RunContext& ctx);

  // Creates /runs/<run_id> with ctx.attrs and topology/{ranks, groups}. Collective.
  void begin(const RunContext& ctx, const std::vector<GroupInfo>& groups);
  // Sets status and end_time (rank 0's clock). Collective.
  void finish(RunStatus status) { finish(std::string(name(status))); }
  void finish(const std::string& status);
  void flush() { results::flush(file_.get()); }

  hid_t file() const { return file_.get(); }
  hid_t run() const { return run_.get(); }
  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm world() const { return world_; }

 private:
  MPI_Comm world_;
  int rank_ = 0, size_ = 1;
  H5Id file_, run_;
};

// Sets one run's status and end time from a single process, through a serial (sec2) handle
// of its own, while this job still holds the file open in parallel: for when the job cannot
// finish collectively (the hang watchdog). The caller makes sure only one process calls it.
// Returns false (quietly) when the file or run cannot be opened.
bool mark_status_alone(const std::string& path, const std::string& run_id, const std::string& status);

// Moved to comm/topology.hpp (node spans are comm's); this name stays until parallel/step
// calls comm::describe_group.

// topology/ranks and topology/groups under `run`.
void write_topology(hid_t run, const comm::Topology& topo, const std::vector<GroupInfo>& groups, bool writer);

}  // namespace meshbench::results
