#include "predict/predict.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/core.h>

#include "context_parallel/attention.hpp"
#include "core/error.hpp"
#include "core/routing.hpp"
#include "expert_parallel/moe.hpp"
#include "data_parallel/data_parallel.hpp"
#include "kernels/layers.hpp"
#include "metrics/metrics.hpp"
#include "pipeline_parallel/pipeline_parallel.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "zero/zero.hpp"

namespace meshbench::parallel {

double RankPrediction::exposed_total() const {
  double s = 0;
  for (const auto& [dim, v] : exposed) s += v;
  return s;
}

namespace {

constexpr int kSb = 4;  // fp32 activations (the pipeline's messages)

// Duration of one item from the calibration.
class Timer {
 public:
  Timer(const Calibration& cal, const std::string& fabric, Prediction& out) : cal_(cal), fabric_(fabric), out_(out) {}
  double operator()(const PassItem& it) {
    if (it.comm) {
      const std::string coll = it.collective == "all_to_allv" ? "all_to_all" : it.collective;
      const Timing t = cal_.collective(coll, it.group, it.bytes, fabric_, it.posted);
      if (t.extrapolated) flag(fmt::format("{} of {} B over {} ranks", coll, it.bytes, it.group));
      return t.seconds;
    }
    if (it.op == Op::kMatmul) {
      const Timing t = cal_.gemm(it.part, it.m, it.n, it.k);
      if (t.extrapolated) flag(fmt::format("GEMM {} {}x{}x{} (not measured: scaled from the nearest measured shape)", it.part, it.m, it.n, it.k));
      return t.seconds;
    }
    return it.units * cal_.rate(op_name(it.op), it.phase, it.part);
  }

 private:
  void flag(std::string what) {
    out_.extrapolated = true;
    if (seen_.insert(what).second) out_.extrapolated_what.push_back(std::move(what));
  }
  const Calibration& cal_;
  std::string fabric_;
  Prediction& out_;
  std::set<std::string> seen_;
};

}  // namespace

Prediction predict_step(const Plan& plan, const Calibration& cal, const std::string& fabric) {
  Prediction out;
  out.calibration = cal.path;
  out.fabric = fabric;
  Timer time(cal, fabric, out);
  const int P = std::max(1, plan.degrees.pp);
  const uint64_t message = uint64_t(tp_dims(plan.model, plan_rank_options(plan, 0).tp, plan_rank_options(plan, 0).cp).rows) *
                           plan.model.hidden * kSb;
  const double p2p = P > 1 ? time(PassItem{true, Op::kMatmul, "", 'F', 0, 0, 0, 0, "pp", "sendrecv", message, 2}) : 0.0;

  struct RankState {
    std::vector<Action> actions;
    size_t next = 0;
    double t = 0;
    RankPrediction pred;
    std::set<int> seen_fwd;
    double since_sync = 0;  // compute since this rank's last communication
  };
  std::vector<RankState> ranks(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    ranks[size_t(r)].actions = rank_actions(plan, r);
    ranks[size_t(r)].pred.pp_rank = r;
  }
  // Posted sends: (activation or gradient, micro-batch, the receiving virtual stage) -> post time.
  std::map<std::tuple<char, int, int>, double> posted;
  std::map<int, double> arrived;  // at the gradient sync (the embedding group's all-reduce)
  const bool tied_pair = P > 1 && plan.model.tied;
  // A collective also waits for the group's last rank to arrive: on average over the ranks,
  // half the arrival skew, which grows with the compute since the group last met (calibration.hpp).
  const double skew = std::isfinite(cal.arrival_skew) ? cal.arrival_skew : 0.0;
  auto run_items = [&](RankState& s, const std::vector<PassItem>& items, int phase) {
    for (const PassItem& it : items) {
      double dt = time(it);
      if (it.comm) {
        dt += 0.5 * skew * s.since_sync;
        s.since_sync = 0;
        s.pred.exposed[it.dim] += dt;
      } else {
        s.pred.compute_s += dt;
        s.since_sync += dt;
        if (it.idle > 0) {  // the group's mean rank waits this share at the next exchange
          s.pred.exposed[it.idle_dim] += it.idle * dt;
          s.pred.compute_s -= it.idle * dt;
        }
      }
      s.t += dt;
      s.pred.phases[size_t(phase)] += dt;
    }
  };
  // Runs each rank's list until it must wait for a send not yet posted; repeats until done.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      RankState& s = ranks[size_t(r)];
      while (s.next < s.actions.size()) {
        const Action& a = s.actions[s.next];
        const int vs = a.chunk * P + r;  // this rank's virtual stage
        bool done = true;
        switch (a.kind) {
          case ActionKind::kForward:
            run_items(s, pass_items(plan, r, a.chunk, 'F', s.seen_fwd.insert(a.chunk).second, false), 0);
            break;
          case ActionKind::kBackward:
            run_items(s, pass_items(plan, r, a.chunk, 'B', false, a.micro == plan.micro_batches - 1), 1);
            break;
          case ActionKind::kSendActivation: posted[{'a', a.micro, vs + 1}] = s.t; break;
          case ActionKind::kSendGradient: posted[{'g', a.micro, vs - 1}] = s.t; break;
          case ActionKind::kRecvActivation:
          case ActionKind::kRecvGradient: {
            const auto it = posted.find({a.kind == ActionKind::kRecvActivation ? 'a' : 'g', a.micro, vs});
            if (it == posted.end()) { done = false; break; }
            const double start = std::max(s.t, it->second);
            const int phase = a.kind == ActionKind::kRecvActivation ? 0 : 1;
            s.pred.bubble_s += start - s.t;
            s.pred.exposed["pp"] += p2p;
            s.pred.phases[size_t(phase)] += start + p2p - s.t;
            s.t = start + p2p;
            s.since_sync = 0;
            break;
          }
          case ActionKind::kGradSync: {
            // the tied embedding's all-reduce joins the first and last stage: it starts when
            // both have arrived; the earlier one's wait is exposed embedding time
            if (tied_pair && (r == 0 || r == P - 1)) {
              arrived.emplace(r, s.t);
              const auto other = arrived.find(r == 0 ? P - 1 : 0);
              if (other == arrived.end()) { done = false; break; }
              const double start = std::max(s.t, other->second);
              s.pred.exposed["embedding"] += start - s.t;
              s.pred.phases[2] += start - s.t;
              s.t = start;
              s.since_sync = 0;  // the pair met: their skew is the wait just charged
            }
            run_items(s, sync_items(plan, r).grad_sync, 2);
            break;
          }
          case ActionKind::kOptimizer: run_items(s, sync_items(plan, r).optimizer, 3); break;
        }
        if (!done) break;
        ++s.next;
        progress = true;
      }
    }
  }
  for (const RankState& s : ranks)
    if (s.next < s.actions.size())
      throw core::RuntimeFault(fmt::format("predict: pipeline rank {} waits forever at action {} of its list (a "
                                           "schedule whose sends and receives do not match)", &s - ranks.data(), s.next));
  // --progress thread (data parallel): the buckets' reductions hide behind the last backward.
  if (plan.progress == Progress::kThread && plan.zero == 0 && plan.overlap) {
    for (RankState& s : ranks) {
      const double hide = std::min(s.pred.exposed["dp"], s.pred.phases[1] / plan.micro_batches);
      s.pred.exposed["dp"] -= hide;
      s.pred.phases[2] -= hide;
      s.t -= hide;
    }
    out.notes.push_back("--progress thread: the bucket reductions overlap the last backward ideally");
  }
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
  if (plan.model.moe_blocks() > 0)
    out.notes.push_back(fmt::format(
        "MoE: the expert loads of --routing {} in expectation ({}); the step is the busiest EP rank's, "
        "compute and exposed ep the group's mean rank's (it waits for the busiest at each all-to-all)",
        core::name(plan.routing),
        plan.routing.mode == core::RoutingMode::kLearned ? "learned: assumed balanced, N k / E rows per expert"
                                                         : "core/routing.hpp's rules, capacity drops applied"));
  if (cal.in_step_factor != 1 || !cal.in_step_factors.empty()) {
    std::string f;
    for (const auto& [k, v] : cal.in_step_factors) f += fmt::format("{}{} {:.2f}", f.empty() ? "" : ", ", k, v);
    out.notes.push_back(fmt::format("collectives {:.2f}x their isolated fits inside a step ({}; the others the overall factor)",
                                    cal.in_step_factor, f));
  }
  if (std::isfinite(cal.posted_factor) || !cal.posted_factors.empty()) {
    std::string f;
    for (const auto& [k, v] : cal.posted_factors) f += fmt::format("{}{} {:.2f}", f.empty() ? "" : ", ", k, v);
    out.notes.push_back(fmt::format("posted calls (dp, edp: the buckets, ZeRO's reductions and gathers) {:.2f}x their "
                                    "fits from the wait on ({}; the others the overall posted factor)",
                                    std::isfinite(cal.posted_factor) ? cal.posted_factor : 1.0, f));
  }
  if (skew > 0)
    out.notes.push_back(fmt::format("arrival skew {:.3f} s per s of compute since a group last met (half charged "
                                    "to each collective, the mean over ranks)", skew));
  else
    out.notes.push_back("no arrival skew in the calibration: collectives charged as if every rank arrived at once");
  if (plan.progress == Progress::kPoll)
    out.notes.push_back("--progress poll: every communication call charged in full (no overlap with compute)");
  return out;
}


}  // namespace meshbench::parallel
