// The step model (issue 26; docs/predict.md "Step prediction"): a plan's step time, phases,
// exposed communication per dimension and bubble, predicted before anything runs from a
// calibration file (calibration.hpp). It walks the executor's own action list: each pipeline
// rank's list from the schedule generators (pipeline_parallel/schedule.hpp), and inside each
// forward and backward the ops and exchanges of the model's wiring (pass_items: the GEMMs,
// attention, elementwise ops, the TP/CP/EP exchanges, ZeRO-3's gathers), then the gradient
// sync (data parallel's buckets, ZeRO's per-unit reductions, the tied embedding's sum) and
// the optimizer. Durations: compute from the calibration's measured rates, communication from
// its collective fits for the group's size and the fabric.
//
// Overlap and progress (the executor's rules on this backend): under --progress poll a
// posted MPI operation advances only inside MPI calls, and on shared memory the copies run on
// the rank's own core, so the model charges every communication call in full, in the order
// the executor issues it: no overlap with compute is assumed. A pipeline receive completes at
// max(its post, the matching send's post) + the transfer; the time before the sender posted
// is bubble, the transfer is exposed pp time (metrics.hpp's split). --progress thread (data
// parallel only) overlaps the bucket reductions with the last backward ideally.
// Not here: memory (step/plan_memory.hpp), the calibration's reading (calibration.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "predict/calibration.hpp"
#include "vocab/op.hpp"
#include "vocab/plan.hpp"

namespace meshbench::parallel {

// The options of pipeline rank `pp_rank`'s model under the plan (tp, cp, ep rank 0: every
// rank's sizes are the same): ZeRO's layout, the stage. plan_memory and the step model use it.
GptOptions plan_rank_options(const Plan& plan, int pp_rank);

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
};

// The items of one pass (phase 'F' or 'B') of model chunk `chunk` of pipeline rank `pp_rank`,
// in the order the model runs them. `last_micro`: the backward of the last micro-batch (SP's
// norm sums; ZeRO-3's gathers as kept or not).
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

struct RankPrediction {
  int pp_rank = 0;
  double step_s = 0, compute_s = 0, bubble_s = 0;
  std::map<std::string, double> exposed;  // per dimension
  std::array<double, 4> phases{};         // kPhaseNames
  double exposed_total() const;
};

struct Prediction {
  double step_time_s = 0, tokens_per_s = 0;
  double bubble = 0;  // the mean over pipeline ranks of bubble / step (metrics.hpp's bubble)
  // per dimension, the mean over ranks (every rank of a pipeline stage predicts alike), as the
  // report's measured exposed time (the time split's mean over ranks)
  std::map<std::string, double> exposed_s;
  std::vector<RankPrediction> per_rank;     // one per pipeline rank (tp, cp, dp, ep ranks alike)
  bool extrapolated = false;                // a size or shape beyond the calibration's measured range
  std::vector<std::string> extrapolated_what;
  std::vector<std::string> notes;           // what the model assumed (routing, overlap)
  std::string calibration, fabric;
};

// Predicts one step of `plan`. `fabric`: the fits' tag ("": the calibration's only one).
// Throws UsageError when the calibration lacks a fit or a rate the plan needs.
Prediction predict_step(const Plan& plan, const Calibration& cal, const std::string& fabric);

}  // namespace meshbench::parallel
