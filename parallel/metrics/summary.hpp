// The run's headline numbers, derived from the gathered record alone (records.hpp): the step
// time as the slowest rank's per step (median, min, p99), tokens/s, FLOP/s and MFU against the
// measured and the datasheet peaks, the pipeline bubble, the exposed share of communication,
// the straggler and whether every (dim, kind) moved exactly the plan's bytes.
// Not here: gathering (gather.hpp), output (report/).
#pragma once

#include <cstdint>

#include "metrics/records.hpp"

namespace meshbench::parallel {

// On rank 0, after gather_record; `datasheet_peak` per rank (NaN without an entry).
StepSummary summarize(const StepRecord& r, double datasheet_peak);

// The bytes the plan moves in (dim, kind) over `steps` steps and `ranks` ranks.
uint64_t expected_bytes(const AnalyticBytes& a, int steps, int ranks);

}  // namespace meshbench::parallel
