#include "schedule.hpp"

#include <fmt/core.h>

namespace meshbench::parallel {

std::vector<Action> accumulation_schedule(int m) {
  std::vector<Action> a;
  for (int i = 0; i < m; ++i) {
    a.push_back({ActionKind::kForward, i, 0});
    a.push_back({ActionKind::kBackward, i, 0});
  }
  a.push_back({ActionKind::kGradSync, 0, 0});
  a.push_back({ActionKind::kOptimizer, 0, 0});
  return a;
}

std::string to_string(const std::vector<Action>& actions) {
  std::string s;
  for (const Action& a : actions) {
    if (!s.empty()) s += ' ';
    switch (a.kind) {
      case ActionKind::kForward: s += fmt::format("F{}", a.micro); break;
      case ActionKind::kBackward: s += fmt::format("B{}", a.micro); break;
      case ActionKind::kGradSync: s += 'G'; break;
      case ActionKind::kOptimizer: s += 'O'; break;
    }
  }
  return s;
}

}  // namespace meshbench::parallel
