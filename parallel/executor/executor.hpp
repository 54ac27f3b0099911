// The executor: runs one rank's action list (schedule.hpp) for one training step over the
// model, the strategies and the trace. Each action is timed into a phase span; the data of
// micro-batch i on this rank is the global batch's slice (dp_rank x m + i) x b, drawn from
// the seed, so any plan and the single-rank reference see the same samples.
// Not here: what a strategy does inside an action (data_parallel/, zero/, pipeline_parallel/
// exchange.hpp), the metrics (metrics/).
#pragma once

#include <cstdint>
#include <vector>

#include "core/op_watch.hpp"
#include "model/model.hpp"
#include "pipeline_parallel/exchange.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "common/grad_sync.hpp"
#include "common/plan.hpp"
#include "common/trace.hpp"

namespace meshbench::parallel {

template <typename S>
struct StepEnv {
  Gpt<S>& model;
  GradSync<S>* sync;   // data parallel or ZeRO; null at dp x cp = 1
  Trace& trace;
  const Plan& plan;
  DataKind data;
  uint64_t seed;
  int dp_rank;          // this rank's index in the dp x cp group
  AdamWConfig adam;
  PipeEnv* pipe = nullptr;  // pipeline parallel; null without
  core::OpWatch* watch = nullptr;  // --op-timeout: the raw MPI call of the pipeline's loss sum is watched too
};

// Runs `actions` as step `step` (data index `data_step`; AdamW step t = adam_t) and returns
// this rank's mean loss over its micro-batches (pipeline: each stage's part, the cross-entropy
// of the last and the MoE aux losses of each, summed over the pipeline after the step's
// clock stops, so every rank reports the whole). Sends are posted
// non-blocking and complete behind the compute; a receive completes before the compute
// that needs it. Stamps trace.step_start/step_end when on.
// zero_grads: start from zero gradients (false continues an interrupted list).
template <typename S>
double run_step(StepEnv<S>& env, const std::vector<Action>& actions, int step, int64_t data_step,
                int adam_t, bool zero_grads = true);

// The first sample of micro-batch `micro` of dp rank `dp_rank` in the global batch.
int64_t first_sample(const Plan& plan, int dp_rank, int micro);

}  // namespace meshbench::parallel
