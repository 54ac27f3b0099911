// The step as lists the step model walks (predict.hpp): each pipeline rank's executor action
// list (the schedule generators), and per forward or backward of a model chunk the ops and
// communication calls the model runs, in its order, read off Gpt<float>'s own forward and
// backward over a shape-only backend (pass_items, pass_record.cpp: GEMMs with their shapes,
// attention, elementwise ops with the elements they write, the TP/SP, CP, EP and ETP exchanges
// at their waits, ZeRO-3's gathers and reductions), then the gradient sync and the optimizer
// (sync_items, op_list.cpp). mpi.predict_op_list proves them equal to a profiled run's events
// (tests/mpi/op_list_check.py). Not here: durations (predict.hpp, calibration.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "common/op.hpp"
#include "common/plan.hpp"

namespace meshbench::parallel {

// The options of pipeline rank `pp_rank`'s model under the plan (tp, cp, ep rank 0: every
// rank's sizes are the same): ZeRO's layout, the stage. plan_memory and the step model use it.
GptOptions plan_rank_options(const Plan& plan, int pp_rank);

// The bytes of one element of the lists' payloads: fp32 activations and gradients.
inline constexpr int kItemScalarBytes = 4;
// The dimensions whose calls the executor posts and waits on later (PassItem::posted): data
// parallel's and the experts' gradient reductions and ZeRO's calls.
bool posted_dim(const std::string& dim);

// One entry of a pass: a compute op (its kind, part, GEMM shape, and units: FLOPs for a GEMM
// or attention, elements for the elementwise ops) or a communication call (its dimension,
// collective, payload S and group size).
struct PassItem {
  bool comm = false;
  Op op = Op::kMatmul;
  std::string part;
  char phase = 'F';
  int m = 0, n = 0, k = 0;
  double units = 0;
  std::string dim, collective;
  uint64_t bytes = 0;
  int group = 1;
  // The executor posts the call and waits on it later: data parallel's buckets and ZeRO's
  // reductions and gathers (the dp and edp dimensions; step/events record them with t_wait after
  // t_start). Timed with the calibration's posted factors.
  bool posted = false;
  // ZeRO-3's calls that the executor's polls complete while the rank computes (zero.cpp: the
  // gathers the prefetch posts a unit ahead, the reduce-scatters before the step's last): no
  // rank blocks on them for long and the ranks do not meet there. Timed with the calibration's
  // overlapped factors; no arrival wait, and the compute since the rank's last meeting runs on.
  bool overlapped = false;
  // Recomputed before the backward (--recompute): hardware FLOPs, not the model's.
  bool recompute = false;
  // Uneven work across a group (expert parallel under a skewed routing: the items describe the
  // busiest rank): the share of this compute item's time that the group's mean rank spends
  // waiting for the busiest at the next exchange of dimension `idle_dim` (0: even work).
  double idle = 0;
  std::string idle_dim;
  // Gradients final from this flat element on (>= 0): in a backward, after this item (the
  // model's grads_ready at each unit's end); for data parallel's bucket pieces in the gradient
  // sync, their bucket's first element (DataParallel posts a bucket once it is final).
  int64_t ready_from = -1;
};

// The items of one pass (phase 'F' or 'B') of model chunk `chunk` of pipeline rank `pp_rank`,
// in the order the model runs them, recorded from the model (pass_record.cpp). `first_micro`:
// the chunk's first forward of the step (ZeRO-3's kept units gathered); `last_micro`: the
// backward of the last micro-batch (SP's norm sums; ZeRO-3's last reduce-scatter waited).
std::vector<PassItem> pass_items(const Plan& plan, int pp_rank, int chunk, char phase, bool first_micro, bool last_micro);

// One step's compute ops of pipeline rank `pp_rank` summed per (op, phase, part): units and
// calls (the op list --op-list prints; scripts/calibrate --compute divides measured op times
// by these units). GEMMs are listed per shape.
struct OpTotal {
  Op op;
  char phase;
  std::string part;
  int m = 0, n = 0, k = 0;
  double units = 0, calls = 0;
};
std::vector<OpTotal> step_op_list(const Plan& plan, int pp_rank);

// One step's communication calls of pipeline rank `pp_rank` per (dim, collective, phase,
// payload, group size), without the pipeline's point-to-point messages (--op-list's comm_list).
struct CommTotal {
  std::string dim, collective;
  char phase = 'F';
  uint64_t bytes = 0;
  int group = 1;
  double calls = 0;
};
std::vector<CommTotal> step_comm_list(const Plan& plan, int pp_rank);

// The gradient sync after the last backward (the executor's kGradSync) and the optimizer's
// items of pipeline rank `pp_rank`.
struct SyncItems {
  std::vector<PassItem> grad_sync, optimizer;
};
SyncItems sync_items(const Plan& plan, int pp_rank);

// The executor's action list of pipeline rank `pp_rank` (as step/setup.cpp makes it).
std::vector<Action> rank_actions(const Plan& plan, int pp_rank);

}  // namespace meshbench::parallel
