#include "predict/op_list.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "expert_parallel/moe.hpp"
#include "data_parallel/data_parallel.hpp"
#include "pipeline_parallel/plan.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "zero/zero.hpp"

namespace meshbench::parallel {

GptOptions plan_rank_options(const Plan& plan, int pp_rank) {
  const comm::Degrees& d = plan.degrees;
  GptOptions mo = plan.zero > 0 ? zero_model_options(plan.zero, d.dp * d.cp, plan.experts_placed() ? d.edp : 0) : GptOptions{};
  mo.tp = TpSpec{d.tp, 0, TpMode{plan.sp, plan.sp_regather, plan.overlap}};
  mo.cp = CpSpec{d.cp, 0, plan.cp_algo, plan.cp_zigzag, plan.overlap};
  if (plan.experts_placed()) mo.ep = EpSpec{d.ep, 0, d.etp, 0};
  if (d.pp > 1)
    mo.stage = StageSpec{stage_chunks(plan, pp_rank), pp_rank == 0, pp_rank == d.pp - 1, plan.micro_batches};
  mo.flash = plan.flash;
  mo.recompute_attention = plan.recompute == "selective";
  mo.recompute_blocks = plan.recompute_blocks();
  return mo;
}

bool posted_dim(const std::string& dim) { return dim == "dp" || dim == "edp"; }


SyncItems sync_items(const Plan& plan, int pp_rank) {
  const GptOptions mo = plan_rank_options(plan, pp_rank);
  const int64_t P = Gpt<float>::flat_elements(plan.model, mo);
  const int64_t experts = plan.experts_placed() ? Gpt<float>::expert_segment_elements(plan.model, mo) : 0;
  const int d = plan.degrees.dp * plan.degrees.cp, edp = std::max(1, plan.degrees.edp);
  SyncItems s;
  auto call = [](std::vector<PassItem>& v, const char* dim, const char* coll, uint64_t bytes, int group, char ph) {
    if (group <= 1 || bytes == 0) return;
    PassItem it;
    it.comm = true, it.dim = dim, it.collective = coll, it.bytes = bytes, it.group = group, it.phase = ph;
    it.posted = posted_dim(dim);
    v.push_back(std::move(it));
  };
  // The tied embedding's copies (pipeline parallel): the embedding group's all-reduce of wte.
  if (plan.degrees.pp > 1 && plan.model.tied && (pp_rank == 0 || pp_rank == plan.degrees.pp - 1)) {
    const TpDims td = tp_dims(plan.model, mo.tp, mo.cp);
    call(s.grad_sync, "embedding", "all_reduce", uint64_t(td.vocab) * plan.model.hidden * kItemScalarBytes, 2, 'G');
  }
  if (plan.zero == 0) {
    // data parallel's buckets (data_parallel.hpp), the expert tensors over edp
    // (DataParallel::post: each bucket's pieces between the expert ranges)
    const std::vector<std::pair<int64_t, int64_t>> ranges =
        plan.experts_placed() ? moe_expert_ranges(Gpt<float>::layout_of(plan.model, mo), plan.model)
                              : std::vector<std::pair<int64_t, int64_t>>{};
    const int64_t be = bucket_elements(plan, P, kItemScalarBytes);
    auto piece = [&](uint64_t bytes, int64_t bucket_lo) {  // a bucket's piece, posted when the bucket is final
      const size_t n = s.grad_sync.size();
      call(s.grad_sync, "dp", "all_reduce", bytes, d, 'G');
      if (s.grad_sync.size() > n) s.grad_sync.back().ready_from = bucket_lo;
    };
    for (int64_t hi = P; hi > 0; hi -= be) {
      const int64_t blo = std::max<int64_t>(0, hi - be);
      int64_t lo = blo;
      for (const auto& [elo, ehi] : ranges) {
        if (ehi <= lo || elo >= hi) continue;
        if (elo > lo) piece(uint64_t(elo - lo) * kItemScalarBytes, blo);
        lo = std::max(lo, ehi);
      }
      if (lo < hi) piece(uint64_t(hi - lo) * kItemScalarBytes, blo);
    }
    // the expert tensors after the buckets, one all-reduce per expert range (DataParallel::finish)
    for (const auto& [elo, ehi] : ranges) call(s.grad_sync, "edp", "all_reduce", uint64_t(ehi - elo) * kItemScalarBytes, edp, 'G');
  } else if (d > 1) {
    const std::vector<Unit> units = Gpt<float>::units_of(plan.model, mo);
    if (plan.zero < 3)
      for (auto it = units.rbegin(); it != units.rend(); ++it) call(s.grad_sync, "dp", "reduce_scatter", uint64_t(it->hi - it->lo) * kItemScalarBytes, d, 'G');
    if (plan.zero < 3)
      for (const Unit& u : units) call(s.optimizer, "dp", "all_gather", uint64_t(u.hi - u.lo) * kItemScalarBytes, d, 'O');
  }
  PassItem adam;
  adam.op = Op::kAdamW;
  adam.phase = 'O';
  adam.units = plan.zero > 0 ? double(P - experts) / d + double(experts) / edp : double(P);
  s.optimizer.insert(s.optimizer.begin(), adam);
  return s;
}

std::vector<Action> rank_actions(const Plan& plan, int pp_rank) {
  return plan.degrees.pp > 1 ? pipeline_schedule(plan.schedule, pipe_shape(plan), pp_rank)
                             : accumulation_schedule(plan.micro_batches);
}

std::vector<OpTotal> step_op_list(const Plan& plan, int pp_rank) {
  std::map<std::tuple<int, char, std::string, int, int, int>, OpTotal> acc;
  auto add = [&](const std::vector<PassItem>& v) {
    for (const PassItem& it : v) {
      if (it.comm) continue;
      OpTotal& o = acc[{int(it.op), it.phase, it.part, it.m, it.n, it.k}];
      o.op = it.op, o.phase = it.phase, o.part = it.part, o.m = it.m, o.n = it.n, o.k = it.k;
      o.units += it.units;
      o.calls += 1;
    }
  };
  const std::vector<Action> actions = rank_actions(plan, pp_rank);
  std::set<int> seen_fwd;
  for (const Action& a : actions) {
    if (a.kind == ActionKind::kForward) {
      add(pass_items(plan, pp_rank, a.chunk, 'F', seen_fwd.insert(a.chunk).second, false));
    } else if (a.kind == ActionKind::kBackward) {
      add(pass_items(plan, pp_rank, a.chunk, 'B', false, a.micro == plan.micro_batches - 1));
    }
  }
  add(sync_items(plan, pp_rank).optimizer);
  std::vector<OpTotal> out;
  for (auto& [k, v] : acc) out.push_back(v);
  return out;
}

std::vector<CommTotal> step_comm_list(const Plan& plan, int pp_rank) {
  std::map<std::tuple<std::string, std::string, char, uint64_t, int>, CommTotal> acc;
  auto add = [&](const std::vector<PassItem>& v) {
    for (const PassItem& it : v) {
      if (!it.comm) continue;
      CommTotal& c = acc[{it.dim, it.collective, it.phase, it.bytes, it.group}];
      c.dim = it.dim, c.collective = it.collective, c.phase = it.phase, c.bytes = it.bytes, c.group = it.group;
      c.calls += 1;
    }
  };
  std::set<int> seen_fwd;
  for (const Action& a : rank_actions(plan, pp_rank)) {
    if (a.kind == ActionKind::kForward)
      add(pass_items(plan, pp_rank, a.chunk, 'F', seen_fwd.insert(a.chunk).second, false));
    else if (a.kind == ActionKind::kBackward)
      add(pass_items(plan, pp_rank, a.chunk, 'B', false, a.micro == plan.micro_batches - 1));
  }
  const SyncItems s = sync_items(plan, pp_rank);
  add(s.grad_sync);
  add(s.optimizer);
  std::vector<CommTotal> out;
  for (auto& [k, v] : acc) out.push_back(v);
  return out;
}


}  // namespace meshbench::parallel
