#include "predict/predict.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <set>
#include <tuple>

#include <fmt/core.h>

#include "context_parallel/attention.hpp"
#include "core/error.hpp"
#include "core/routing.hpp"
#include "expert_parallel/moe.hpp"
#include "data_parallel/data_parallel.hpp"
#include "kernels/layers.hpp"
#include "kernels/flops.hpp"
#include "pipeline_parallel/plan.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "pipeline_parallel/walk.hpp"
#include "zero/zero.hpp"

namespace meshbench::parallel {

double RankPrediction::exposed_total() const {
  double s = 0;
  for (const auto& [dim, v] : exposed) s += v;
  return s;
}

namespace {

constexpr int kActBytes = 4;  // fp32 activations (the pipeline's messages)

// Duration of one item from the costs; flags what was extrapolated.
class Timer {
 public:
  Timer(const Costs& costs, Prediction& out) : costs_(costs), out_(out) {}
  double operator()(const PassItem& it) {
    std::string what;
    const Timing t = costs_.time(it, &what);
    if (t.extrapolated) {
      out_.extrapolated = true;
      if (seen_.insert(what).second) out_.extrapolated_what.push_back(std::move(what));
    }
    return t.seconds;
  }

 private:
  const Costs& costs_;
  Prediction& out_;
  std::set<std::string> seen_;
};

}  // namespace

double arrival_wait(double offset, double drift) {
  offset = std::abs(offset);
  if (!(drift > 0)) return offset / 2;
  const double sigma = drift * std::sqrt(std::numbers::pi / 2);  // E|delta| = sigma sqrt(2 / pi)
  const double z = offset / sigma;
  return 0.5 * (drift * std::exp(-0.5 * z * z) + offset * std::erf(z / std::numbers::sqrt2));
}

Prediction predict_step(const Plan& plan, const Calibration& cal, const std::string& fabric) {
  return predict_step(plan, CalibrationCosts(cal, fabric));
}

namespace {

struct RankState {
  std::vector<Action> actions;
  size_t next = 0;
  double t = 0;
  RankPrediction pred;
  std::set<int> seen_fwd;
  double since_sync = 0;  // compute since this rank's last communication
  // the group's mean rank's wait for its busiest (the modelled uneven expert loads) since the
  // last call of that group's dimension: half the busiest's lead there
  double idle_since = 0;
  std::string idle_dim;
  double recompute_flops = 0;  // GEMM and attention FLOPs of --recompute
};

// The step model's handler of the action walk (pipeline_parallel/walk.hpp): each pipeline
// rank's list in simulated time, the one selected by `at`. A receive whose send is not posted
// yet, and the tied embedding's all-reduce before its partner stage arrived, do not complete:
// the walk stops there and the next rank runs.
class PredictWalk {
 public:
  PredictWalk(const Plan& plan, const Costs& costs, Timer& time, double p2p)
      : plan_(plan), costs_(costs), time_(time), p2p_(p2p), P_(std::max(1, plan.degrees.pp)),
        tied_pair_(P_ > 1 && plan.model.tied) {}

  void at(RankState& s, int r) { s_ = &s, r_ = r; }
  bool any_overlapped() const { return any_overlapped_; }

  void begin(const Action&) {}
  void end(const Action&, const char*) {}
  bool forward(const Action& a) {
    run_items(passes(a.chunk, 'F', s_->seen_fwd.insert(a.chunk).second, false), 0);
    return true;
  }
  bool backward(const Action& a) {
    run_items(passes(a.chunk, 'B', false, a.micro == plan_.micro_batches - 1), 1);
    return true;
  }
  bool send(const Action& a) {  // repeatable: posts at the same time again
    const int vs = a.chunk * P_ + r_;
    if (a.kind == ActionKind::kSendActivation)
      posted_[{'a', a.micro, vs + 1}] = s_->t;
    else
      posted_[{'g', a.micro, vs - 1}] = s_->t;
    return true;
  }
  bool recv(const Action& a) {
    const bool act = a.kind == ActionKind::kRecvActivation;
    const auto it = posted_.find({act ? 'a' : 'g', a.micro, a.chunk * P_ + r_});
    if (it == posted_.end()) return false;
    RankState& s = *s_;
    const double start = std::max(s.t, it->second);
    s.pred.bubble_s += start - s.t;
    s.pred.exposed["pp"] += p2p_;
    s.pred.phases[act ? 0 : 1] += start + p2p_ - s.t;
    s.t = start + p2p_;
    s.since_sync = 0;
    return true;
  }
  bool exchange(const Action& snd, const Action& rcv) { return send(snd) && recv(rcv); }
  bool grad_sync(const Action&) {
    RankState& s = *s_;
    // the tied embedding's all-reduce joins the first and last stage: it starts when both
    // have arrived; the earlier one's wait is exposed embedding time
    if (tied_pair_ && (r_ == 0 || r_ == P_ - 1)) {
      arrived_.emplace(r_, s.t);
      const auto other = arrived_.find(r_ == 0 ? P_ - 1 : 0);
      if (other == arrived_.end()) return false;
      const double start = std::max(s.t, other->second);
      s.pred.exposed["embedding"] += start - s.t;
      s.pred.phases[2] += start - s.t;
      s.t = start;
      s.since_sync = 0;  // the pair met: their skew is the wait just charged
    }
    run_items(syncs().grad_sync, 2);
    return true;
  }
  bool optimizer(const Action&) {
    run_items(syncs().optimizer, 3);
    return true;
  }

 private:
  // A collective also waits for the group's last rank to arrive: on average over the ranks,
  // half the arrival skew, which grows with the compute since the group last met, at the rate
  // the calibration measured for the call's dimension and collective (calibration.hpp). A call
  // the polls complete while the rank computes (PassItem::overlapped) is no meeting: no wait,
  // and the compute since the last meeting runs on. Every call also costs its posting.
  void run_items(const std::vector<PassItem>& items, int phase) {
    RankState& s = *s_;
    for (const PassItem& it : items) {
      double dt = time_(it);
      if (it.comm) {
        any_overlapped_ = any_overlapped_ || it.overlapped;
        if (!it.overlapped) {
          // the wait for the group's last rank: the random drift over the compute since the last
          // meeting, combined with the busiest rank's lead where this call's group has one
          // (charged already, as the idle share of the uneven ops: only what the drift adds here)
          const double lead = it.dim == s.idle_dim ? 2 * s.idle_since : 0.0;
          dt += arrival_wait(lead, costs_.arrival_skew(it.dim, it.collective) * s.since_sync) - lead / 2;
          s.since_sync = 0;
          if (it.dim == s.idle_dim) s.idle_since = 0;
        }
        dt += costs_.post_seconds(it);  // posting it, exposed as the time split counts it
        s.pred.exposed[it.dim] += dt;
      } else {
        s.pred.compute_s += dt;
        s.since_sync += dt;
        if (it.recompute && (it.op == Op::kMatmul || (it.op == Op::kAttention && it.part != "rowdot")))
          s.recompute_flops += it.units;
        if (it.idle > 0) {  // the group's mean rank waits this share at the next exchange
          s.pred.exposed[it.idle_dim] += it.idle * dt;
          s.pred.compute_s -= it.idle * dt;
          s.idle_since += it.idle * dt;
          s.idle_dim = it.idle_dim;
        }
      }
      s.t += dt;
      s.pred.phases[size_t(phase)] += dt;
    }
  }
  // A pass's items depend only on (rank, chunk, phase, first forward, last backward): built once
  // each (a 16384-GPU search asks thousands of plans of hundreds of micro-batches).
  const std::vector<PassItem>& passes(int chunk, char phase, bool first, bool last) {
    const auto key = std::make_tuple(r_, chunk, phase, first, last);
    auto it = pass_cache_.find(key);
    if (it == pass_cache_.end()) it = pass_cache_.emplace(key, pass_items(plan_, r_, chunk, phase, first, last)).first;
    return it->second;
  }
  const SyncItems& syncs() {
    auto it = sync_cache_.find(r_);
    if (it == sync_cache_.end()) it = sync_cache_.emplace(r_, sync_items(plan_, r_)).first;
    return it->second;
  }

  const Plan& plan_;
  const Costs& costs_;
  Timer& time_;
  const double p2p_;
  const int P_;
  const bool tied_pair_;
  RankState* s_ = nullptr;
  int r_ = 0;
  bool any_overlapped_ = false;  // a call the polls complete (the poll note names them)
  // Posted sends: (activation or gradient, micro-batch, the receiving virtual stage) -> post time.
  std::map<std::tuple<char, int, int>, double> posted_;
  std::map<int, double> arrived_;  // at the gradient sync (the embedding group's all-reduce)
  std::map<std::tuple<int, int, char, bool, bool>, std::vector<PassItem>> pass_cache_;
  std::map<int, SyncItems> sync_cache_;
};

// Walks every pipeline rank's list until each must wait for a send not yet posted; repeats
// until all are done. A list that never finishes is a schedule whose sends and receives do
// not match: a fault, not a prediction.
void walk_ranks(std::vector<RankState>& ranks, PredictWalk& w) {
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < ranks.size(); ++r) {
      RankState& s = ranks[r];
      w.at(s, int(r));
      const size_t next = walk_actions(s.actions, s.next, w);
      progress = progress || next != s.next;
      s.next = next;
    }
  }
  for (const RankState& s : ranks)
    if (s.next < s.actions.size())
      throw core::RuntimeFault(fmt::format("predict: pipeline rank {} waits forever at action {} of its list (a "
                                           "schedule whose sends and receives do not match)", &s - ranks.data(), s.next));
}

// --progress thread (data parallel), or a GPU's collectives on their own stream: the buckets'
// reductions hide behind the last backward.
void hide_buckets(const Plan& plan, const Costs& costs, std::vector<RankState>& ranks, Prediction& out) {
  const bool hide = plan.progress == Progress::kThread || costs.overlaps_posted();
  if (!hide || plan.zero != 0 || !plan.overlap) return;
  for (RankState& s : ranks) {
    const double h = std::min(s.pred.exposed["dp"], s.pred.phases[1] / plan.micro_batches);
    s.pred.exposed["dp"] -= h;
    s.pred.phases[2] -= h;
    s.t -= h;
  }
  out.notes.push_back(costs.overlaps_posted() ? "the bucket reductions overlap the last backward ideally"
                                              : "--progress thread: the bucket reductions overlap the last backward ideally");
}

// What the prediction assumed, for the reader: MoE loads, the costs' own notes, recomputation,
// the polls.
void add_notes(const Plan& plan, const Costs& costs, bool any_overlapped, Prediction& out) {
  if (plan.model.moe_blocks() > 0)
    out.notes.push_back(fmt::format(
        "MoE: the expert loads of --routing {} in expectation ({}); the step is the busiest EP rank's, "
        "compute and exposed ep the group's mean rank's (it waits for the busiest at each all-to-all)",
        core::name(plan.routing),
        plan.routing.mode == core::RoutingMode::kLearned ? "learned: assumed balanced, N k / E rows per expert"
                                                         : "core/routing.hpp's rules, capacity drops applied"));
  for (std::string& n : costs.notes()) out.notes.push_back(std::move(n));
  if (plan.recompute != "none")
    out.notes.push_back(fmt::format("--recompute {}: {} again before each block's backward, as the engine runs it",
                                    plan.recompute,
                                    plan.recompute != "full"    ? "the attention core"
                                    : plan.recompute_layers > 0 ? fmt::format("the first {} blocks' forward of each chunk",
                                                                              plan.recompute_layers)
                                                                : std::string("the block's forward")));
  if (plan.progress == Progress::kPoll && !costs.overlaps_posted())
    out.notes.push_back(any_overlapped
                            ? "--progress poll: every communication call charged in full (no overlap with compute), "
                              "but ZeRO-3's calls that the polls complete: what the calibration measured at their wait"
                            : "--progress poll: every communication call charged in full (no overlap with compute)");
}

// MFU and HFU: the model's FLOPs per step (the measured runs' definition, outcome.cpp) over
// the step, per GPU, against the datasheet's dense bf16 peak; the hardware's add what
// --recompute runs again (each pipeline rank's, times the ranks of its stage).
ClusterFigures cluster_figures(const Plan& plan, const Costs& costs, const Cluster& c,
                               const std::vector<RankState>& ranks, double step_s) {
  const double flops = step_flops(plan.model).total() * plan.micro_batches * plan.degrees.dp;
  const int P = std::max(1, plan.degrees.pp);
  double again = 0;
  for (const RankState& s : ranks) again += s.recompute_flops * (double(plan.world) / P);
  ClusterFigures f;
  f.model_flops_per_gpu_s = step_s > 0 ? flops / step_s / plan.world : 0;
  f.hardware_flops_per_gpu_s = step_s > 0 ? (flops + again) / step_s / plan.world : 0;
  f.mfu = f.model_flops_per_gpu_s / c.gpu.peak_bf16_flops;
  f.hfu = f.hardware_flops_per_gpu_s / c.gpu.peak_bf16_flops;
  f.hbm_bytes = c.gpu.hbm_bytes;
  f.efficiency_source = c.efficiency_source;
  f.cluster = c.name;
  f.crosses_nodes = costs.crosses_nodes();
  return f;
}

}  // namespace

Prediction predict_step(const Plan& plan, const Costs& costs) {
  Prediction out;
  out.calibration = costs.source();
  out.fabric = costs.fabric();
  Timer time(costs, out);
  const int P = std::max(1, plan.degrees.pp);
  const GptOptions o0 = plan_rank_options(plan, 0);
  PassItem msg;  // one stage boundary's activations
  msg.comm = true, msg.dim = "pp", msg.collective = "sendrecv", msg.group = 2;
  msg.bytes = uint64_t(tp_dims(plan.model, o0.tp, o0.cp).rows) * plan.model.hidden * kActBytes;
  std::vector<RankState> ranks(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    ranks[size_t(r)].actions = rank_actions(plan, r);
    ranks[size_t(r)].pred.pp_rank = r;
  }
  PredictWalk w(plan, costs, time, P > 1 ? time(msg) : 0.0);
  walk_ranks(ranks, w);
  hide_buckets(plan, costs, ranks, out);
  double bubble = 0;
  for (RankState& s : ranks) {
    s.pred.step_s = s.t;
    out.step_time_s = std::max(out.step_time_s, s.t);
    bubble += s.t > 0 ? s.pred.bubble_s / s.t : 0;
    for (auto& [dim, v] : s.pred.exposed) out.exposed_s[dim] += v / P;  // the mean over ranks
    out.per_rank.push_back(s.pred);
  }
  out.bubble = P > 1 ? bubble / P : 0;
  out.tokens_per_s = out.step_time_s > 0 ? double(plan.global_tokens()) / out.step_time_s : 0;
  add_notes(plan, costs, w.any_overlapped(), out);
  if (const Cluster* c = costs.cluster()) {
    out.cluster = cluster_figures(plan, costs, *c, ranks, out.step_time_s);
    if (plan.recompute == "none") out.notes.push_back("no activation recomputation: hardware FLOPs = model FLOPs (HFU = MFU)");
  }
  return out;
}

}  // namespace meshbench::parallel
