// A calibration file (scripts/calibrate; docs/results.md "Calibration files") read for the step
// model: the collectives' piecewise latency-bandwidth fits, and this machine's compute rates
// (GEMM times per shape, seconds per FLOP or per element of the other op classes). Every
// lookup that finds nothing throws core::UsageError naming what was asked (exit 2): a
// prediction never falls back silently to a default. A size outside a fit's measured range
// is answered from its end segment and flagged extrapolated.
// Not here: the step model that asks (predict.hpp), the fitting (scripts/meshbench/fit.py).
#pragma once

#include <cstdint>
#include <limits>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace meshbench::parallel {

struct FitSegment {
  uint64_t lo = 0, hi = 0;  // the measured sizes it covers (bytes of S)
  double alpha = 0, beta = 0;  // s, s/byte
};

struct CollectiveFit {
  std::string collective, backend, dtype, span, tag;
  int group_size = 0;
  std::vector<FitSegment> segments;  // in size order
};

struct GemmTime {
  std::string part;
  int m = 0, n = 0, k = 0;
  double flops = 0, seconds = 0;  // per call
};

// Seconds per unit (a FLOP for attention, an element for the elementwise ops) of one
// (op, phase, part), measured by scripts/calibrate --compute.
struct OpRate {
  std::string op, phase, part, unit;
  double seconds_per_unit = 0;
};

// A modelled duration and whether it left a fit's measured range (or, for compute, the
// measured shapes).
struct Timing {
  double seconds = 0;
  bool extrapolated = false;
};

struct Calibration {
  std::string path;
  std::vector<CollectiveFit> fits;
  std::vector<GemmTime> gemms;
  std::vector<OpRate> rates;
  int threads = 0;  // the compute measurement's --threads (0: not recorded)
  // Arrival skew (/compute attribute arrival_skew; scripts/calibrate --compute): how far apart
  // two ranks reach a collective, per second of compute since their last one (the ratio of the
  // summed skews to the summed compute segments of the calibration's 2-rank runs). NaN: the
  // file has none (format_version 1, or no run of 2 or more ranks).
  double arrival_skew = std::numeric_limits<double>::quiet_NaN();
  // The same ratio per call site, "dim/collective" (/compute attribute arrival_skews): the
  // calls of one dimension and collective only, the median over the runs that make them. A
  // call without an entry takes arrival_skew.
  std::map<std::string, double> arrival_skews;
  // In-step factors (/compute attributes in_step_factor, in_step_factors): how much longer a
  // blocking collective takes inside a step, from the last rank's arrival to the first rank's
  // completion, than its fit (measured in isolation: a barrier before each call, one buffer),
  // per collective and over all (the calibration's 2-rank runs). collective() applies the
  // collective's own factor, else the overall one; 1 when the file has none.
  double in_step_factor = 1;
  std::map<std::string, double> in_step_factors;
  // Posted factors (/compute attributes posted_factor, posted_factors): the same ratio for calls
  // the executor posts and waits on later (data parallel's buckets, ZeRO's reductions and
  // gathers), from the last rank's start of the wait to the first completion: what is left after
  // the progress the call made while others were posted and waited on. NaN and empty: the file
  // has none, and posted calls take the blocking factors.
  double posted_factor = std::numeric_limits<double>::quiet_NaN();
  std::map<std::string, double> posted_factors;
  // Overlapped factors (/compute attributes overlapped_factor, overlapped_factors): the same
  // ratio for ZeRO-3's calls that the executor's polls complete while the rank computes
  // (PassItem::overlapped): the ranks' mean blocked time at their wait (0 where a test() found
  // one complete) over the fit. NaN and empty: the file has none (made before 2026-12-03), and
  // such calls take the posted factors.
  double overlapped_factor = std::numeric_limits<double>::quiet_NaN();
  std::map<std::string, double> overlapped_factors;
  // Post factors per call site, "dim/collective" (/compute attribute post_factors): the time a
  // rank spends posting the site's calls (t_posted - t_post, exposed in the time split) over
  // their fits. Empty: the file has none, and posting is not charged.
  std::map<std::string, double> post_factors;
  double factor_of(const std::string& collective, bool posted = false, bool overlapped = false) const {
    if (overlapped) {
      const auto it = overlapped_factors.find(collective);
      if (it != overlapped_factors.end()) return it->second;
      if (std::isfinite(overlapped_factor)) return overlapped_factor;
    }
    if (posted) {
      const auto it = posted_factors.find(collective);
      if (it != posted_factors.end()) return it->second;
      if (std::isfinite(posted_factor)) return posted_factor;
    }
    const auto it = in_step_factors.find(collective);
    return it != in_step_factors.end() ? it->second : in_step_factor;
  }

  // The fit of (collective, group size) under fabric tag `tag` ("": the calibration's only
  // tag for that key): t = alpha + beta n from the segment holding n (between segments the
  // nearer in log size, beyond them the end one, extrapolated). Throws UsageError naming
  // the collective, group size and fabric when no fit matches or several tags do.
  // `posted`: a call the executor posts and waits on later (factor_of).
  // `overlapped`: one the polls complete (factor_of). fit() is the same without the factor.
  Timing collective(const std::string& collective, int group_size, uint64_t bytes, const std::string& tag,
                    bool posted = false, bool overlapped = false) const;
  Timing fit(const std::string& collective, int group_size, uint64_t bytes, const std::string& tag) const;
  // A GEMM of `part` (m x k)(k x n): the measured time of that shape (per call of its op,
  // every GEMM of the call included: a backward's two), else the part's measured shape nearest
  // in m n k scaled by the ratio of m n k (extrapolated). Throws
  // UsageError when the file holds no GEMM of the part.
  Timing gemm(const std::string& part, int m, int n, int k) const;
  // Seconds per unit of (op, phase, part). Throws UsageError when the file has no rate for it.
  double rate(const std::string& op, char phase, const std::string& part) const;
};

// Reads a calibration file; throws UsageError (missing, not a calibration file, another
// format_version, malformed tables) naming the path and what is wrong.
Calibration read_calibration(const std::string& path);

}  // namespace meshbench::parallel
