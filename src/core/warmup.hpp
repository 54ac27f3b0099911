// The adaptive warm-up rule: keep calling until the time per call is stable. Calls are made
// in windows of `window`; after each, the caller reports the window's median time per call
// (the same value on every rank, e.g. the maximum over ranks of each rank's median) and the
// window's wall time. Warm-up has converged when the last window's median is within
// `tolerance` of the previous window's, once the floor is met (`floor_calls` calls or
// `floor_seconds`, whichever comes first); it gives up, not converged, at `max_calls` calls or
// `max_seconds`. Pure arithmetic, so every rank reaches the same decision from the same
// inputs. Why a floor: MPICH over UCX shared memory runs slowly until UCX's receive FIFO has
// been used once (docs/collectives.md, "Warm-up"), and the slow phase has plateaus that a window
// comparison alone takes for stability.
#pragma once

namespace meshbench::core {

struct WarmupPolicy {
  int window = 10;
  double tolerance = 0.05;     // relative
  int floor_calls = 100;
  double floor_seconds = 0.25;
  int max_calls = 1000;
  double max_seconds = 1.0;
};

class WarmupTracker {
 public:
  explicit WarmupTracker(WarmupPolicy p) : p_(p) {}
  // Calls to make in the next window (0 once done).
  int next_window() const;
  // Records a finished window of `calls` calls; returns true when warm-up is over.
  bool add_window(int calls, double median_s, double seconds);
  bool done() const { return done_; }
  bool converged() const { return converged_; }
  int calls() const { return calls_; }
  double seconds() const { return seconds_; }
  double last_median() const { return last_; }

 private:
  WarmupPolicy p_;
  int calls_ = 0;
  double seconds_ = 0, last_ = 0;
  bool have_last_ = false, done_ = false, converged_ = false;
};

}  // namespace meshbench::core
