// The step path's reporters: the results::Reporter interface the collectives use, plus a
// timed step as it finishes and the whole record at the end (metrics/records.hpp). Console
// (step_console.hpp), HDF5 (step_h5.hpp), JSON lines (step_jsonl.hpp) and Perfetto (perfetto.hpp) are
// reporters on world rank 0, which holds the gathered record. They format; they never time
// or communicate. StepReporters calls them in order and holds the first write error, after
// which it calls none of them again (the driver ends the run with it, exit 3).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "metrics/records.hpp"
#include "results/reporter.hpp"

namespace meshbench::parallel {

class StepReporter : public results::Reporter {
 public:
  virtual void step(const StepPoint&) {}                          // one timed step, as it ends
  virtual void add_step_attrs(const nlohmann::ordered_json&) {}   // step/ attributes known later
  virtual void record(const StepRecord&) {}                       // the run's whole record
};

class StepReporters {
 public:
  // `label` prefixes its errors ("--trace: ...", "JSON lines: ..."); empty for the results file.
  void add(std::unique_ptr<StepReporter> r, std::string label = "");
  void step(const StepPoint& p);
  void add_step_attrs(const nlohmann::ordered_json& attrs);
  void record(const StepRecord& r);
  void finish(results::RunStatus s);
  // The first write error of any reporter (a throw, or a reporter's own error()), or empty.
  const std::string& error();
  bool empty() const { return list_.empty(); }

 private:
  template <typename F>
  void each(F&& f);
  std::vector<std::pair<std::unique_ptr<StepReporter>, std::string>> list_;
  std::string error_;
};

}  // namespace meshbench::parallel
