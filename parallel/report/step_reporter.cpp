#include "report/step_reporter.hpp"

namespace meshbench::parallel {

void StepReporters::add(std::unique_ptr<StepReporter> r, std::string label) {
  list_.emplace_back(std::move(r), std::move(label));
}

template <typename F>
void StepReporters::each(F&& f) {
  for (auto& [r, label] : list_) {
    if (!error().empty()) return;
    try {
      f(*r);
    } catch (const std::exception& e) {
      error_ = label.empty() ? std::string(e.what()) : label + ": " + e.what();
    }
  }
}

void StepReporters::step(const StepPoint& p) {
  each([&](StepReporter& r) { r.step(p); });
}
void StepReporters::add_step_attrs(const nlohmann::ordered_json& attrs) {
  each([&](StepReporter& r) { r.add_step_attrs(attrs); });
}
void StepReporters::record(const StepRecord& rec) {
  each([&](StepReporter& r) { r.record(rec); });
}
void StepReporters::finish(results::RunStatus s) {
  each([&](StepReporter& r) { r.finish(s); });
}

const std::string& StepReporters::error() {
  if (error_.empty())
    for (const auto& [r, label] : list_)
      if (!r->error().empty()) {
        error_ = r->error();
        break;
      }
  return error_;
}

}  // namespace meshbench::parallel
