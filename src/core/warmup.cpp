#include "core/warmup.hpp"

#include <algorithm>
#include <cmath>

namespace meshbench::core {

int WarmupTracker::next_window() const {
  if (done_) return 0;
  return std::max(1, std::min(p_.window, p_.max_calls - calls_));
}

bool WarmupTracker::add_window(int calls, double median_s, double seconds) {
  if (done_) return true;
  calls_ += calls;
  seconds_ += seconds;
  bool floor_met = calls_ >= p_.floor_calls || seconds_ >= p_.floor_seconds;
  bool stable = have_last_ && std::fabs(median_s - last_) <= p_.tolerance * last_;
  last_ = median_s;
  have_last_ = true;
  if (floor_met && stable) {
    done_ = converged_ = true;
  } else if (calls_ >= p_.max_calls || seconds_ >= p_.max_seconds) {
    done_ = true;
  }
  return done_;
}

}  // namespace meshbench::core
