// The executor: runs one rank's action list (schedule.hpp) for one training step over the
// model, the strategies and the trace. Each action is timed into a phase span; the data of
// micro-batch i on this rank is the global batch's slice (dp_rank x m + i) x b, drawn from
// the seed, so any plan and the single-rank reference see the same samples.
// Not here: what a strategy does inside an action (strategies/), the metrics (step/).
#pragma once

#include <cstdint>
#include <vector>

#include "vocab/grad_sync.hpp"
#include "model/model.hpp"
#include "vocab/plan.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "vocab/trace.hpp"

namespace meshbench::parallel {

// The pipeline of a rank (pipeline parallel): its communicators (recording, dims "pp" and
// "embedding") and its place. embedding is null where the rank is in no embedding group or
// the head is untied.
struct PipeEnv {
  comm::Communicator* pp = nullptr;
  comm::Communicator* embedding = nullptr;
  int stages = 1, rank = 0, chunks = 1;
  int virtual_stage(int chunk) const { return chunk * stages + rank; }
  int last_virtual_stage() const { return stages * chunks - 1; }
  // The tag of the message across the boundary after virtual stage `lower` for micro-batch
  // `micro`, activations (grad false) or gradients (true): unique within a step.
  int tag(int micro, int lower, bool grad) const { return (micro * stages * chunks + lower) * 2 + (grad ? 1 : 0); }
};

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

// The point-to-point payload per step of pipeline rank pipe.rank (dim "pp", kinds send and
// recv), from the plan: per boundary between virtual stages and per micro-batch one
// activation and one gradient of `message_bytes` (b x s x h values); a virtual stage sends
// its output activations unless it is the last and its input gradient unless it is the
// first, and receives the same. Over a pipeline: 2 m (P V - 1) messages each way. With a
// tied head, the embedding group's all-reduce of wte (`embedding_bytes`, dim "embedding").
std::vector<AnalyticBytes> pipeline_analytic(const PipeEnv& pipe, int micro_batches, uint64_t message_bytes,
                                             uint64_t embedding_bytes);

// The first sample of micro-batch `micro` of dp rank `dp_rank` in the global batch.
int64_t first_sample(const Plan& plan, int dp_rank, int micro);

}  // namespace meshbench::parallel
