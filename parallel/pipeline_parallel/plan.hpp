// Pipeline parallel (GPipe, 1F1B, interleaved 1F1B; --mesh pp=P): its rules, the layers each
// virtual stage holds, and the bytes its point-to-point exchange must move. The schedules are
// schedule.hpp (action lists, one per rank); the exchange the executor runs is exchange.hpp.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "pipeline_parallel/schedule.hpp"
#include "common/grad_sync.hpp"
#include "common/plan.hpp"

namespace meshbench::parallel {

// The pipeline rules: the schedule's shape (pipeline_rule_broken), no ZeRO-3 and no --sp with
// pp in this build, and a layer split every virtual stage gets at least one layer from.
void validate_pipeline_parallel(const Plan& plan);

// The pipeline's shape (P, m, V, G) and the global layer ranges [lo, hi) of pipeline rank
// `pp_rank`'s chunks, in chunk order.
PipeShape pipe_shape(const Plan& plan);
std::vector<std::pair<int, int>> stage_chunks(const Plan& plan, int pp_rank);
std::vector<int> layers_per_virtual_stage(const Plan& plan);  // P x V entries

// The schedule's idle share of a step in theory: (P - 1) / (m + P - 1) for GPipe and 1F1B,
// (P - 1) / (V m + P - 1) interleaved over V chunks (docs/pipeline_parallel.md). metrics.hpp measures it.
inline double bubble_theory(int stages, int micro_batches, int chunks) {
  return double(stages - 1) / (double(chunks) * micro_batches + stages - 1);
}

}  // namespace meshbench::parallel
