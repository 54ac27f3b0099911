// JSON lines beside the HDF5 file (FILE.jsonl, results/output_path.hpp): one line per timed
// step (the slowest rank's time and phases, the loss) and one summary line, appended when the
// run's record is complete. A run that timed no step writes nothing.
#pragma once

#include <string>

#include "report/step_reporter.hpp"

namespace meshbench::parallel {

void write_step_jsonl(const std::string& path, const std::string& run_id, const StepRecord& r);

class JsonlStepReporter final : public StepReporter {
 public:
  // `run_id`: the id the results file gave the run.
  JsonlStepReporter(std::string path, std::string run_id) : path_(std::move(path)), run_id_(std::move(run_id)) {}
  void record(const StepRecord& r) override {
    if (r.steps > 0) write_step_jsonl(path_, run_id_, r);
  }

 private:
  std::string path_, run_id_;
};

}  // namespace meshbench::parallel
