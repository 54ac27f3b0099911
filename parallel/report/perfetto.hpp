// --trace FILE.json: the step trace in the Chrome trace-event format that Perfetto
// (ui.perfetto.dev) and chrome://tracing open: one process per rank, one track for its
// compute ops and one per communicator (dimension and group), complete ("X") events in
// microseconds on rank 0's clock. Rank clocks are aligned by the offsets estimated at
// start-up (comm/clock_sync.hpp); each rank's offset error is written into its process name
// and the file's metadata. Not here: the rows themselves (metrics/records.hpp event_rows).
#pragma once

#include <string>
#include <vector>

#include "comm/clock_sync.hpp"
#include "report/step_reporter.hpp"

namespace meshbench::parallel {

// On rank 0, with every rank's rows and clock offset; throws core::RuntimeFault on I/O.
// Pipeline runs add, per rank, a "pipeline" track with one block per forward or backward
// pass ("F3", "B3c1": micro-batch 3, chunk 1) and a counter of the stored activations.
// `compute_track`: the compute track's name ("compute (modelled)" under --compute modelled).
void write_perfetto(const std::string& path, const std::vector<EventRow>& rows,
                    const std::vector<comm::ClockOffset>& offsets,
                    const std::vector<std::string>& hosts, const std::vector<SlotRow>& slots = {},
                    const std::vector<PassRow>& passes = {}, const std::string& compute_track = "compute");

// The reporter: writes the trace from the run's record (events with --profile or --trace).
class PerfettoStepReporter final : public StepReporter {
 public:
  explicit PerfettoStepReporter(std::string path) : path_(std::move(path)) {}
  void record(const StepRecord& r) override {
    const bool modelled = r.plan.find("[modelled compute") != std::string::npos;
    write_perfetto(path_, r.events, r.offsets, r.hosts, r.slots, r.passes, modelled ? "compute (modelled)" : "compute");
  }

 private:
  std::string path_;
};

}  // namespace meshbench::parallel
