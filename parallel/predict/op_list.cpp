#include "predict/op_list.hpp"

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

namespace {

constexpr int kSb = 4;  // fp32 activations and gradients

// The dimensions whose calls the executor posts and waits on later (PassItem::posted).
bool posted_dim(const std::string& dim) { return dim == "dp" || dim == "edp"; }

// Builds one pass's items in the order the model's wiring runs them (model.cpp, linear.cpp,
// attention.cpp, moe.cpp).
class PassBuilder {
 public:
  PassBuilder(const Plan& plan, int pp_rank, char phase)
      : p_(plan), c_(plan.model), mo_(plan_rank_options(plan, pp_rank)), d_(tp_dims(c_, mo_.tp, mo_.cp)),
        t_(plan.degrees.tp), sp_(plan.sp && t_ > 1), ph_(phase) {}

  std::vector<PassItem> items;

  void op(Op o, const char* part, double units) {
    PassItem it;
    it.op = o;
    it.part = part;
    it.phase = ph_;
    it.units = units;
    it.idle = idle_, it.idle_dim = idle_ > 0 ? idle_dim_ : "";
    items.push_back(std::move(it));
  }
  // A GEMM as linear.cpp's call(): (M x K)(K x N), `gemms` GEMMs of that shape.
  void gemm(const char* part, int M, int Nout, int K, double gemms = 1) {
    PassItem it;
    it.op = Op::kMatmul;
    it.part = part;
    it.phase = ph_;
    it.m = M, it.n = Nout, it.k = K;
    it.units = gemms * 2.0 * M * Nout * K;
    it.idle = idle_, it.idle_dim = idle_ > 0 ? idle_dim_ : "";
    items.push_back(std::move(it));
  }
  void comm(const char* dim, const char* coll, uint64_t bytes, int group) {
    if (group <= 1) return;  // a group of one issues no call
    PassItem it;
    it.comm = true;
    it.posted = posted_dim(dim);
    it.phase = ph_;
    it.dim = dim;
    it.collective = coll;
    it.bytes = bytes;
    it.group = group;
    items.push_back(std::move(it));
  }

  uint64_t act() const { return uint64_t(d_.tokens) * c_.hidden * kSb; }  // one b x s/cp x h
  // f's forward / g's backward under SP: gather the sequence
  void sp_gather() { if (sp_) comm("tp", "all_gather", act(), t_); }

  // column_forward / row_forward / column_backward / row_backward (linear.cpp)
  void column_fwd(int OC) {
    sp_gather();
    gemm("fwd", d_.tokens, OC, c_.hidden);
  }
  void row_fwd(int K) {
    gemm("fwd", d_.tokens, c_.hidden, K);
    if (t_ <= 1) return;
    comm("tp", sp_ ? "reduce_scatter" : "all_reduce", act(), t_);
    op(Op::kResidual, "bias_residual", double(d_.rows) * c_.hidden);
  }
  void column_bwd(int OC) {
    const int N = d_.tokens, C = c_.hidden;
    if (t_ <= 1) return gemm("bwd", N, OC, C, 2);
    // With overlap (linear.cpp) each collective is posted before a GEMM and waited on after it:
    // the item stands at the wait, where the ranks meet (a posted call progresses only inside
    // MPI calls under --progress poll, none of which the GEMM makes).
    const bool ov = p_.overlap;
    if (!sp_) {
      gemm("dinput", N, OC, C);
      if (!ov) comm("tp", "all_reduce", act(), t_);
      gemm("dweight", N, OC, C);
      if (ov) comm("tp", "all_reduce", act(), t_);
      return;
    }
    if (p_.sp_regather && !ov) comm("tp", "all_gather", act(), t_);
    gemm("dinput", N, OC, C);
    if (p_.sp_regather && ov) comm("tp", "all_gather", act(), t_);
    if (!ov) comm("tp", "reduce_scatter", act(), t_);
    gemm("dweight", N, OC, C);
    if (ov) comm("tp", "reduce_scatter", act(), t_);
  }
  void row_bwd(int K) {
    sp_gather();
    gemm("bwd", d_.tokens, c_.hidden, K, 2);
  }

  // Ring and all-gather attention (attention.cpp): the (query chunk, key chunk) pairs that see
  // something, against every cp rank's chunks, for the cp rank with the most (zig-zag: all
  // alike; contiguous: the last), and the FLOPs of one pair (Tq x Tk x hs products).
  int chunk_pairs() const {
    const int cp = p_.degrees.cp;
    int most = 0;
    for (int r = 0; r < cp; ++r) {
      const CpChunks mine = cp_chunks(c_.seq, mo_.cp, r);
      int n = 0;
      for (int j = 0; j < cp; ++j) {
        const CpChunks theirs = cp_chunks(c_.seq, mo_.cp, j);
        for (int a = 0; a < mine.count; ++a)
          for (int k = 0; k < theirs.count; ++k) n += theirs.start[k] <= mine.start[a] + mine.len - 1 ? 1 : 0;
      }
      most = std::max(most, n);
    }
    return most;
  }
  double pair_flops(bool backward) const {
    const CpChunks mine = cp_chunks(c_.seq, mo_.cp, 0);
    const double prod = 2.0 * c_.micro_batch * d_.heads * double(mine.len) * mine.len * c_.head_size();
    return (backward ? 5 : 2) * prod;
  }
  void chunk_attention(bool backward) {
    const int n = chunk_pairs();
    for (int i = 0; i < n; ++i) op(Op::kAttention, backward ? "chunk.bwd" : "chunk.fwd", pair_flops(backward));
  }

  void attention_fwd() {
    const int B = c_.micro_batch, T = c_.seq, hs = c_.head_size(), cp = p_.degrees.cp;
    const double full = 4.0 * double(attention_block_macs(T, hs)) * B * d_.heads;
    if (cp <= 1) return op(Op::kAttention, "", full);
    const uint64_t kv = uint64_t(d_.tokens) * 2 * d_.kv_heads * hs * kSb;  // this rank's K and V
    const double kv_el = double(d_.tokens) * 2 * d_.kv_heads * hs;
    switch (p_.cp_algo) {
      case CpAlgo::kRing:
        op(Op::kCopy, "kv.copy", kv_el);
        for (int s = 0; s + 1 < cp; ++s) comm("cp", "sendrecv", kv, cp);
        chunk_attention(false);
        return;
      case CpAlgo::kAllGather:
        op(Op::kCopy, "kv.copy", kv_el);
        comm("cp", "all_gather", kv * cp, cp);
        chunk_attention(false);
        return;
      case CpAlgo::kUlysses: {
        const double q = double(d_.heads) * hs, k = double(d_.kv_heads) * hs, rows = d_.tokens;
        op(Op::kCopy, "heads.pack", rows * (q + 2 * k));
        comm("cp", "all_to_all", uint64_t(rows * (q + 2 * k)) * kSb, cp);
        op(Op::kCopy, "layout", rows * (q + 2 * k));
        op(Op::kAttention, "fwd", full / cp);
        op(Op::kCopy, "layout", rows * q);
        comm("cp", "all_to_all", uint64_t(rows * q) * kSb, cp);
        op(Op::kCopy, "heads.unpack", rows * q);
        return;
      }
    }
  }
  void attention_bwd() {
    const int B = c_.micro_batch, T = c_.seq, hs = c_.head_size(), cp = p_.degrees.cp;
    const double full = 8.0 * double(attention_block_macs(T, hs)) * B * d_.heads;
    if (cp <= 1) return op(Op::kAttention, "", full);
    const uint64_t kv = uint64_t(d_.tokens) * 2 * d_.kv_heads * hs * kSb;
    const double kv_el = double(d_.tokens) * 2 * d_.kv_heads * hs;
    switch (p_.cp_algo) {
      case CpAlgo::kRing:
        op(Op::kCopy, "kv.copy", kv_el);
        for (int s = 0; s + 1 < cp; ++s) comm("cp", "sendrecv", kv, cp);   // K, V around the ring
        for (int s = 0; s < cp; ++s) comm("cp", "sendrecv", kv, cp);       // dK, dV home
        op(Op::kAttention, "rowdot", double(d_.tokens) * d_.attn_width);
        chunk_attention(true);
        op(Op::kCopy, "dkv.add", kv_el);
        return;
      case CpAlgo::kAllGather:
        op(Op::kCopy, "kv.copy", kv_el);
        comm("cp", "all_gather", kv * cp, cp);
        op(Op::kAttention, "rowdot", double(d_.tokens) * d_.attn_width);
        chunk_attention(true);
        comm("cp", "reduce_scatter", kv * cp, cp);
        op(Op::kCopy, "dkv.add", kv_el);
        return;
      case CpAlgo::kUlysses: {
        const double q = double(d_.heads) * hs, k = double(d_.kv_heads) * hs, rows = d_.tokens;
        op(Op::kCopy, "heads.pack", rows * q);
        comm("cp", "all_to_all", uint64_t(rows * q) * kSb, cp);
        op(Op::kCopy, "layout", rows * q);
        op(Op::kAttention, "bwd", full / cp);
        op(Op::kCopy, "layout", rows * (q + 2 * k));
        comm("cp", "all_to_all", uint64_t(rows * (q + 2 * k)) * kSb, cp);
        op(Op::kCopy, "heads.unpack", rows * (q + 2 * k));
        return;
      }
    }
  }

  // Rows each local expert of the busiest EP rank computes per micro-batch (moe.cpp's
  // each_expert), from the routing workload's rules (core/routing.hpp) in expectation: every
  // EP rank's N tokens choose k experts; balanced (and learned: assumed balanced) spreads them
  // evenly; hot-expert and rotating send kHotShare N of each rank's tokens to one hot expert
  // and the rest evenly over the others; hot-rank sends kHotShare N tokens' k choices to the
  // hot rank's experts. Capacity drops cap an expert at its capacity per token holder.
  std::vector<double> expert_rows(int N) const {
    const int E = c_.experts, k = c_.top_k, ep = std::max(1, p_.degrees.ep), local = E / ep;
    const double h = core::kHotShare * N, holders = ep;
    std::vector<double> rows(size_t(local), double(N) * k / E * holders);
    switch (p_.routing.mode) {
      case core::RoutingMode::kHotExpert:
      case core::RoutingMode::kRotating:
        rows.assign(size_t(local), (double(N) * k - h) / std::max(1, E - 1) * holders);
        rows[0] = h * holders;  // the rank holding the hot expert is the busiest
        break;
      case core::RoutingMode::kHotRank: {
        const int hot = std::min(k, local);
        rows.assign(size_t(local), (double(N) * k - h * hot) / E * holders);
        for (int e = 0; e < hot; ++e) rows[size_t(e)] += h * holders;
        break;
      }
      case core::RoutingMode::kZipf: {
        std::vector<double> w(static_cast<size_t>(E));
        double sum = 0;
        for (int i = 0; i < E; ++i) sum += w[size_t(i)] = 1.0 / std::pow(i + 1.0, p_.routing.zipf_s);
        for (int e = 0; e < local; ++e) rows[size_t(e)] = std::min(1.0, k * w[size_t(e)] / sum) * N * holders;
        break;
      }
      default: break;
    }
    const double cap = moe_capacity(moe_local_config(c_, moe_tokens(mo_)));
    if (cap > 0)
      for (double& r : rows) r = std::min(r, cap * holders);
    return rows;
  }

  // A MoE block's MLP (moe.cpp) on the busiest EP rank (expert_rows).
  void moe(bool fwd) {
    const GptConfig lc = moe_local_config(c_, moe_tokens(mo_));
    const int N = lc.micro_batch * lc.seq, C = c_.hidden, E = c_.experts, k = c_.top_k, F = c_.ffn;
    const int ep = std::max(1, p_.degrees.ep), etp = std::max(1, p_.degrees.etp);
    const int Fl = F / etp;
    const std::vector<double> rows = expert_rows(N);
    double local_rows = 0;
    for (double r : rows) local_rows += r;
    // all-to-all-v payload: this rank's blocks (sent and received, its own included); timed by
    // the all-to-all fit at the larger of what it sends and what it receives
    const uint64_t moved = uint64_t(std::max(double(N) * k, local_rows) * C * kSb);
    // The ops that scale with the rows this rank's experts compute run longer on the busiest
    // EP rank (these items) than on the group's mean rank, which holds N k rows (every rank's
    // N tokens choose k experts): the mean rank waits the difference at the next all-to-all.
    const double idle = ep > 1 && local_rows > 0 ? std::max(0.0, 1.0 - double(N) * k / local_rows) : 0.0;
    auto uneven = [&](bool on) { idle_ = on ? idle : 0.0, idle_dim_ = "ep"; };
    auto experts = [&](const char* part, bool up, double gemms) {
      for (double r : rows) {
        const int m = int(std::lround(r));
        if (m > 0) gemm(part, m, up ? Fl : C, up ? C : Fl, gemms);
      }
    };
    if (fwd) {
      gemm("router.fwd", N, E, C);
      op(Op::kRouter, "", double(N) * E);  // top-k
      op(Op::kRouter, "", double(N) * E);  // capacity plan
      op(Op::kPermute, "", double(N) * k * C);
      if (ep > 1) {
        comm("ep", "all_to_all", uint64_t(E) * kSb, ep);  // the counts
        comm("ep", "all_to_allv", moved, ep);
        uneven(true);
        op(Op::kPermute, "", local_rows * C);
      }
      uneven(true);
      experts("expert.fc.fwd", true, 1);
      op(Op::kGelu, "", local_rows * Fl);
      experts("expert.proj.fwd", false, 1);
      if (ep > 1) op(Op::kPermute, "", local_rows * C);
      uneven(false);
      if (ep > 1) comm("ep", "all_to_allv", moved, ep);
      op(Op::kPermute, "", double(N) * k * C);
      return;
    }
    op(Op::kPermute, "", double(N) * k * C);
    if (ep > 1) {
      comm("ep", "all_to_allv", moved, ep);
      uneven(true);
      op(Op::kPermute, "", local_rows * C);
    }
    uneven(true);
    experts("expert.proj.bwd", false, 2);
    op(Op::kGelu, "", local_rows * Fl);
    experts("expert.fc.bwd", true, 2);
    if (ep > 1) op(Op::kPermute, "", local_rows * C);
    uneven(false);
    if (ep > 1) comm("ep", "all_to_allv", moved, ep);
    op(Op::kPermute, "", double(N) * k * C);
    op(Op::kRouter, "", double(N) * E);
    gemm("router.bwd", N, E, C, 2);
    op(Op::kResidual, "", double(N) * C);
  }

  void block_fwd(int l) {
    const double nC = double(d_.rows) * c_.hidden;
    op(Op::kLayerNorm, "", nC);
    column_fwd(d_.qkv);
    attention_fwd();
    op(Op::kResidual, "", nC);
    row_fwd(d_.attn_width);
    op(Op::kLayerNorm, "", nC);
    if (c_.is_moe(l)) {
      op(Op::kResidual, "", nC);
      return moe(true);
    }
    column_fwd(d_.ffn);
    op(Op::kGelu, "", double(d_.tokens) * d_.ffn);
    op(Op::kResidual, "", nC);
    row_fwd(d_.ffn);
  }
  void block_bwd(int l, bool sync) {
    const double nC = double(d_.rows) * c_.hidden;
    if (c_.is_moe(l)) {
      moe(false);
    } else {
      row_bwd(d_.ffn);
      op(Op::kGelu, "", double(d_.tokens) * d_.ffn);
      column_bwd(d_.ffn);
    }
    op(Op::kLayerNorm, "", nC);
    row_bwd(d_.attn_width);
    attention_bwd();
    column_bwd(d_.qkv);
    op(Op::kLayerNorm, "", nC);
    if (sync && sp_) {
      const uint64_t a16 = (uint64_t(c_.hidden) + 15) / 16 * 16;
      comm("tp", "all_reduce", (3 * a16 + c_.hidden) * kSb, t_);
    }
  }
  void embed_fwd() {
    op(Op::kEmbedding, "", double(d_.tokens) * c_.hidden);
    if (t_ > 1) comm("tp", sp_ ? "reduce_scatter" : "all_reduce", act(), t_);
  }
  void embed_bwd() {
    sp_gather();
    op(Op::kEmbedding, "", double(d_.tokens) * c_.hidden);
  }
  void head_fwd() {
    const double NV = double(d_.tokens) * d_.vocab;
    op(Op::kLayerNorm, "", double(d_.rows) * c_.hidden);
    column_fwd(d_.vocab);
    if (t_ <= 1) return op(Op::kLoss, "", NV);
    // vocabulary-parallel cross-entropy (vocab_parallel.cpp): the row max over the slice, its
    // all-reduce (max), the partial sums, two all-reduces (sum of exponentials, target logit), finish
    op(Op::kLoss, "", NV);
    comm("tp", "all_reduce", uint64_t(d_.tokens) * kSb, t_);
    op(Op::kLoss, "", NV);
    for (int i = 0; i < 2; ++i) comm("tp", "all_reduce", uint64_t(d_.tokens) * kSb, t_);
    op(Op::kLoss, "", double(d_.tokens));
  }
  void head_bwd(bool sync) {
    op(Op::kLoss, "", double(d_.tokens) * d_.vocab);
    column_bwd(d_.vocab);
    op(Op::kLayerNorm, "", double(d_.rows) * c_.hidden);
    if (sync && sp_) {
      const uint64_t a16 = (uint64_t(c_.hidden) + 15) / 16 * 16;
      comm("tp", "all_reduce", (a16 + c_.hidden) * kSb, t_);
    }
  }

  const Plan& p_;
  const GptConfig& c_;
  GptOptions mo_;
  TpDims d_;
  int t_;
  bool sp_;
  char ph_;
  double idle_ = 0;           // PassItem::idle of the items added now
  const char* idle_dim_ = "";
};

// ZeRO-3's gathers and reductions around a unit (zero.hpp): gathered before each use unless
// kept; its gradients reduce-scattered after every backward.
struct Units {
  std::vector<Unit> units;
  int embed = -1, head = -1;
  std::map<int, int> block;  // layer -> unit
};

Units stage_units(const Plan& plan, int pp_rank) {
  const GptOptions mo = plan_rank_options(plan, pp_rank);
  Units u;
  u.units = Gpt<float>::units_of(plan.model, mo);
  for (size_t i = 0; i < u.units.size(); ++i) {
    const std::string& n = u.units[i].name;
    if (n == "embed") u.embed = int(i);
    else if (n == "head") u.head = int(i);
    else if (n.rfind("h.", 0) == 0) u.block[std::stoi(n.substr(2))] = int(i);
  }
  return u;
}


}  // namespace

std::vector<PassItem> pass_items(const Plan& plan, int pp_rank, int chunk, char phase, bool first_micro, bool last_micro) {
  PassBuilder b(plan, pp_rank, phase);
  const GptOptions& mo = b.mo_;
  const std::vector<std::pair<int, int>> chunks =
      mo.stage ? mo.stage->chunks : std::vector<std::pair<int, int>>{{0, plan.model.layers}};
  const bool first = !mo.stage || mo.stage->first, last = !mo.stage || mo.stage->last;
  const bool embeds = first && chunk == 0, heads = last && chunk + 1 == int(chunks.size());
  const auto [lo, hi] = chunks.at(size_t(chunk));
  const int d = plan.degrees.dp * plan.degrees.cp;
  const bool z3 = plan.zero == 3 && d > 1;
  const Units units = z3 ? stage_units(plan, pp_rank) : Units{};
  // ZeRO-3: a unit is gathered before its use (once per step when kept: the first forward). The
  // pass's first gather is posted and waited on at once; the prefetch posts the others a unit
  // ahead, and the polls between ops complete them (overlapped).
  bool first_gather = true;
  auto gather = [&](int u) {
    if (!z3 || u < 0) return;
    if (plan.keep_params && !(phase == 'F' && first_micro)) return;
    b.comm("dp", "all_gather", uint64_t(units.units[size_t(u)].hi - units.units[size_t(u)].lo) * kSb, d);
    b.items.back().overlapped = !first_gather && plan.prefetch > 0;
    first_gather = false;
  };
  // Its reduce-scatters are posted after each unit's backward and completed by the polls, but for
  // the step's last (the last micro-batch's, of the rank's first chunk: waited on at the
  // gradient sync) and without overlap (waited on at once).
  std::ptrdiff_t last_scatter = -1;
  auto scatter = [&](int u) {
    if (!z3 || u < 0) return;
    b.comm("dp", "reduce_scatter", uint64_t(units.units[size_t(u)].hi - units.units[size_t(u)].lo) * kSb, d);
    b.items.back().overlapped = plan.overlap;
    last_scatter = std::ptrdiff_t(b.items.size()) - 1;
  };
  auto unit_of = [&](int l) { auto it = units.block.find(l); return it == units.block.end() ? -1 : it->second; };
  const int head_unit = units.head >= 0 ? units.head : units.embed;  // a tied head without a stage of its own
  if (phase == 'F') {
    if (embeds) { gather(units.embed); b.embed_fwd(); }
    for (int l = lo; l < hi; ++l) { gather(unit_of(l)); b.block_fwd(l); }
    if (heads) { if (head_unit != units.embed || !embeds) gather(head_unit); b.head_fwd(); }
    return b.items;
  }
  const bool sync = last_micro || plan.zero == 3;
  // the model's grads_ready after each unit's backward (the units of the rank's layout)
  const Units all = z3 ? units : stage_units(plan, pp_rank);
  auto ready = [&](int u) {
    if (u >= 0 && !b.items.empty()) b.items.back().ready_from = all.units[size_t(u)].lo;
  };
  auto all_unit_of = [&](int l) { auto it = all.block.find(l); return it == all.block.end() ? -1 : it->second; };
  const int all_head = all.head >= 0 ? all.head : all.embed;
  if (heads) { if (head_unit != units.embed || !embeds) gather(head_unit); b.head_bwd(sync); if (units.head >= 0) scatter(units.head); ready(all_head); }
  const std::vector<char> full = Gpt<float>::recomputed_blocks(plan.model, mo);  // --recompute full's blocks
  for (int l = hi - 1; l >= lo; --l) {
    gather(unit_of(l));
    // the block's forward (full) or its attention core (selective) again
    if (plan.recompute == "selective" || full[size_t(l)]) {
      const size_t from = b.items.size();
      b.ph_ = 'F';
      if (plan.recompute == "full") b.block_fwd(l);
      else b.attention_fwd();
      b.ph_ = 'B';
      for (size_t i = from; i < b.items.size(); ++i) b.items[i].recompute = true;
    }
    b.block_bwd(l, sync);
    scatter(unit_of(l));
    ready(all_unit_of(l));
  }
  if (embeds) { gather(units.embed); b.embed_bwd(); scatter(units.embed); ready(all.embed); }
  if (last_micro && chunk == 0 && last_scatter >= 0) b.items[size_t(last_scatter)].overlapped = false;
  return b.items;
}

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
    call(s.grad_sync, "embedding", "all_reduce", uint64_t(td.vocab) * plan.model.hidden * kSb, 2, 'G');
  }
  if (plan.zero == 0) {
    // data parallel's buckets (data_parallel.hpp), the expert tensors over edp
    // (DataParallel::post: each bucket's pieces between the expert ranges)
    const std::vector<std::pair<int64_t, int64_t>> ranges =
        plan.experts_placed() ? moe_expert_ranges(Gpt<float>::layout_of(plan.model, mo), plan.model)
                              : std::vector<std::pair<int64_t, int64_t>>{};
    int64_t in_experts = 0;
    for (const auto& [elo, ehi] : ranges) in_experts += ehi - elo;
    const int64_t be = bucket_elements(plan, P, kSb);
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
        if (elo > lo) piece(uint64_t(elo - lo) * kSb, blo);
        lo = std::max(lo, ehi);
      }
      if (lo < hi) piece(uint64_t(hi - lo) * kSb, blo);
    }
    call(s.grad_sync, "edp", "all_reduce", uint64_t(in_experts) * kSb, edp, 'G');
  } else if (d > 1) {
    const std::vector<Unit> units = Gpt<float>::units_of(plan.model, mo);
    if (plan.zero < 3)
      for (auto it = units.rbegin(); it != units.rend(); ++it) call(s.grad_sync, "dp", "reduce_scatter", uint64_t(it->hi - it->lo) * kSb, d, 'G');
    if (plan.zero < 3)
      for (const Unit& u : units) call(s.optimizer, "dp", "all_gather", uint64_t(u.hi - u.lo) * kSb, d, 'O');
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
