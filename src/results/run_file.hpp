// One run in an HDF5 results file, on the process that writes it (world rank 0; the drivers
// gather the other ranks' rows to it): loads or creates the file in memory (h5.hpp MemFile),
// makes the run id unique inside it, writes the root attributes, /runs/<run_id> with the run's
// provenance and its topology/ group, and at the end the status and end time. Shared by every
// binary that writes HDF5 (the collective reporter, step_bench), so every file has the same
// skeleton. Data groups beneath the run are the caller's.
//
// Publishing: the whole file is written beside the old one and renamed over it (MemFile), at
// begin() and finish() always, and in between when publish_due() says so: after every point
// while a publish costs little, and never more than about a tenth of the run's wall time
// spent publishing a large file. A failed publish (a full disk, an I/O error) leaves the file
// as the last publish made it; the error is sticky: nothing more is published, and the
// driver ends the run (exit 3) with error() as its message.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "results/h5.hpp"
#include "results/record.hpp"
#include "results/run_context.hpp"

namespace meshbench::results {

class RunFile {
 public:
  // Updates ctx.run_id (and attrs["run_id"]) when the id is taken (-2, -3, ...).
  RunFile(const std::string& path, bool append, RunContext& ctx);

  // Creates /runs/<run_id> with ctx.attrs and topology/{ranks, groups}, then publishes.
  void begin(const RunContext& ctx, const std::vector<GroupInfo>& groups);
  // Sets status, end_time and the publishing cost, then publishes (durably).
  void finish(RunStatus status) { finish(std::string(name(status))); }
  void finish(const std::string& status);
  // Publishes now when `force` or when due (see above). Returns false once an error is held.
  bool publish(bool force = false);
  const std::string& error() const { return error_; }
  // Holds `why` as the error (the first one stays; empty: none), with what the file on disk
  // holds now: a write into the file that failed, or a publish.
  void hold_error(const std::string& why);

  hid_t file() const { return file_.id(); }
  hid_t run() const { return run_.get(); }
  const std::string& path() const { return file_.path(); }

 private:
  MemFile file_;
  H5Id run_;
  std::string error_;
  bool appended_ = false;
  double last_end_ = 0, last_cost_ = 0;
};

// Sets one run's status and end time in the file on disk, in place (a serial handle of its
// own): for when the job cannot finish normally (the hang watchdog). The caller makes sure
// only one process calls it. Returns false (quietly) when the file or run cannot be opened.
bool mark_status_alone(const std::string& path, const std::string& run_id, const std::string& status);

// topology/ranks and topology/groups under `run`.
void write_topology(hid_t run, const comm::Topology& topo, const std::vector<GroupInfo>& groups);

}  // namespace meshbench::results
