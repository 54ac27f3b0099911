// Host wall clock for timing: a monotonic clock, never the time of day.
#pragma once

#include <chrono>

namespace meshbench::core {

using Clock = std::chrono::steady_clock;

inline double now_seconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

}  // namespace meshbench::core
