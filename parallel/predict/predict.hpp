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
// the executor waits on them (a posted call at its wait: op_list.hpp): no overlap with compute
// is assumed. A pipeline receive completes at
// max(its post, the matching send's post) + the transfer; the time before the sender posted
// is bubble, the transfer is exposed pp time (metrics.hpp's split). --progress thread (data
// parallel only) overlaps the bucket reductions with the last backward ideally.
// Not here: the op and call lists it walks (op_list.hpp), memory (step/plan_memory.hpp), the
// calibration's reading (calibration.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "predict/calibration.hpp"
#include "predict/costs.hpp"
#include "predict/op_list.hpp"
#include "common/plan.hpp"

namespace meshbench::parallel {

struct RankPrediction {
  int pp_rank = 0;
  double step_s = 0, compute_s = 0, bubble_s = 0;
  std::map<std::string, double> exposed;  // per dimension
  std::array<double, 4> phases{};         // kPhaseNames
  double exposed_total() const;
};

// A prediction on a described cluster (costs.hpp's ClusterCosts): utilisation and placement.
struct ClusterFigures {
  std::string cluster, efficiency_source;
  double mfu = 0, hfu = 0, model_flops_per_gpu_s = 0, hardware_flops_per_gpu_s = 0;
  double hbm_bytes = 0;                        // per GPU, for the memory check (step/plan_only.cpp)
  std::map<std::string, bool> crosses_nodes;   // per dimension with a group of 2 or more
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
  std::string calibration, fabric;          // the --predict file (calibration or cluster), the fits' tag
  std::optional<ClusterFigures> cluster;     // with a cluster description
};

// Predicts one step of `plan`. `fabric`: the fits' tag ("": the calibration's only one).
// Throws UsageError when the calibration lacks a fit or a rate the plan needs.
Prediction predict_step(const Plan& plan, const Calibration& cal, const std::string& fabric);
// The same with any costs (a calibration's or a cluster's: costs.hpp; read_costs picks).
Prediction predict_step(const Plan& plan, const Costs& costs);

// The mean over a group's two ranks of the waiting one's wait at a collective, when one rank
// arrives `offset` seconds after the other by the modelled work (an EP rank's heavier expert
// load) and the two also drift apart at random with a mean gap of `drift` (the arrival skew's
// share of the segment): half the mean of |offset + delta| for a Gaussian delta of mean
// absolute value `drift` (a folded normal's mean). offset / 2 without drift, drift / 2 without
// an offset; close to offset / 2 once the offset is a few drifts: the drift changes by how
// much the later rank is late, not that one rank waits.
double arrival_wait(double offset, double drift);

}  // namespace meshbench::parallel
