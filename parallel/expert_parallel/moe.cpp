// MoeMlp<S>: the MoE blocks' layout entries, buffers and forward/backward wiring (moe.hpp).
#include "expert_parallel/moe.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/core.h>

#include "core/timer.hpp"
#include "common/group_comm.hpp"

namespace meshbench::parallel {

int moe_capacity(const GptConfig& c) {
  if (c.capacity_factor <= 0) return 0;
  return static_cast<int>(
      std::ceil(c.capacity_factor * static_cast<double>(c.tokens() * c.top_k) / c.experts));
}

int64_t moe_rows(const GptConfig& c) {
  const int64_t all = c.tokens() * c.top_k, cap = moe_capacity(c);
  return cap > 0 ? std::min(all, cap * c.experts) : all;
}

int64_t moe_local_rows(const GptConfig& c, const EpSpec& ep) {
  if (ep.size <= 1) return moe_rows(c);
  const int64_t el = c.experts / ep.size, cap = moe_capacity(c);
  // From one source: each token sends at most min(k, E/P) rows here, and each local expert
  // keeps at most `capacity` of them.
  const int64_t per = c.tokens() * std::min<int64_t>(c.top_k, el);
  return ep.size * (cap > 0 ? std::min(per, el * cap) : per);
}

int64_t moe_routing_ints(const GptConfig& c, const EpSpec& ep) {
  return 2 * c.tokens() * c.top_k + 2 * c.experts + 1 + (ep.size > 1 ? moe_local_rows(c, ep) : 0);
}

MoeMemory moe_memory(const GptConfig& whole, int64_t sb, const EpSpec& ep, int tp, const MoeTokens& tokens) {
  MoeMemory m;
  const int64_t L = whole.moe_blocks();
  if (L == 0) return m;
  const GptConfig c = moe_local_config(whole, tokens);  // the rank's rows
  const int64_t Nd = whole.tokens() / std::max(1, tokens.cp);  // the dense MLP's rows
  const int64_t C = c.hidden, F = c.ffn, E = c.experts, k = c.top_k, N = c.tokens(),
                R = moe_rows(c), RL = moe_local_rows(c, ep), el = E / ep.size, Ft = F / std::max(1, tp);
  const int64_t T = std::max(1, ep.etp), Fe = F / T;  // an expert's slice under expert tensor parallel
  const int64_t expert = Fe * C + Fe + C * Fe + C, dense_mlp = Ft * C + Ft + C * Ft + C;
  m.param_elements = L * (E * C + el * expert - dense_mlp);
  // per MoE block: probs (N,E), gates (N,k), prob_sum (E), xp, yp (R,C), h, hg (R,F) in S;
  // idx, slot (N,k) and counts (2E+1) in int32; the dense block's fch, fch_gelu (N,F/tp) are gone.
  // h, hg hold the local experts' RL rows; expert parallel adds x_local, y_local (RL,C) and
  // the received rows' places (RL int32); expert tensor parallel runs h, hg on T x RL rows of
  // F/T (the same size) and adds the gathered x, y (T RL, C).
  const int64_t epx = ep.size > 1 ? RL : 0, etx = T > 1 ? T * RL : 0;
  // (each entry starts 16-element aligned, as the activation layout places it)
  const auto a16 = [](int64_t x) { return (x + 15) / 16 * 16; };
  m.block_float_bytes = (a16(N * E) + a16(N * k) + a16(E) + 2 * a16(R * C) + 2 * a16(RL * F) + 2 * a16(epx * C) +
                         2 * a16(etx * C) - 2 * a16(Nd * Ft)) * sb;
  m.activation_bytes = L * (m.block_float_bytes + moe_routing_ints(c, ep) * 4);
  // dlogits (N,E), dgates (N,k), dyp (R,C), dh (R,F), dxr (N,C), dprobs, zero bias, dbias (E)
  // (expert parallel: received rows and d(local rows) (RL,C), the counts 2E)
  // (a token split: the routed counts and probability sums, 2E)
  // (expert tensor parallel: the gathered d(y) (T RL, C), the counts (T+1) E/P, a zero bias C)
  m.buffer_bytes = (N * E + N * k + R * C + RL * F + N * C + 3 * E + (ep.size > 1 ? 2 * RL * C + 2 * E : 0) +
                    (tokens.parts > 1 ? 2 * E : 0) + (T > 1 ? etx * C + (T + 1) * el + C : 0)) * sb;
  return m;
}

GptConfig moe_local_config(const GptConfig& c, const MoeTokens& t) {
  GptConfig l = c;
  l.seq = c.seq / std::max(1, t.parts);
  return l;
}

int64_t moe_sp_sync_elements(const GptConfig& c, const EpSpec& ep) {
  if (ep.size > 1 || ep.etp > 1) return int64_t{c.experts} * c.hidden;  // the router (the experts reduce over edp)
  Layout l;  // the router and every expert, as laid out in a block (entries 16-aligned)
  moe_add_params(l, c, "h.0.", ep);
  return l.total();
}

int64_t moe_add_params(Layout& layout, const GptConfig& c, const std::string& prefix, const EpSpec& ep,
                       int64_t unit_lo, int64_t pad_multiple) {
  const int64_t C = c.hidden, T = ep.etp, F = c.ffn / T, E = c.experts, el = E / ep.size;
  // expert tensor parallel: fc by rows, proj by columns, slice etp_rank of T
  const Shard rows = T > 1 ? Shard{ShardRule::kRowSplit, ep.etp_rank, ep.etp, {}, -1} : Shard{};
  const Shard cols = T > 1 ? Shard{ShardRule::kColSplit, ep.etp_rank, ep.etp, {}, -1} : Shard{};
  layout.add(prefix + "moe.router.weight", {E, C}, true);
  layout.pad_unit(unit_lo, pad_multiple);
  int64_t first = -1;
  for (int64_t e = ep.rank * el; e < (ep.rank + 1) * el; ++e) {
    // The global expert index: an expert-parallel rank's entries match the full model's.
    const std::string p = fmt::format("{}moe.expert.{}.", prefix, e);
    const int64_t at = layout.add(p + "fc.weight", {F, C}, true, rows);
    if (first < 0) first = at;
    layout.add(p + "fc.bias", {F}, false, rows);
    layout.add(p + "proj.weight", {C, F}, true, cols);
    layout.add(p + "proj.bias", {C}, false);
  }
  return first;
}

std::vector<std::pair<int64_t, int64_t>> moe_expert_ranges(const Layout& layout, const GptConfig& c) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int l = 0; l < c.layers; ++l) {
    if (!c.is_moe(l)) continue;
    const std::string prefix = fmt::format("h.{}.moe.expert.", l);
    int64_t lo = -1, hi = -1;
    for (const LayoutEntry& e : layout.entries())
      if (e.name.rfind(prefix, 0) == 0) {
        if (lo < 0) lo = e.offset;
        hi = e.offset + e.numel;
      }
    if (lo >= 0) out.emplace_back(lo, hi);
  }
  return out;
}

template <typename S>
void MoeMlp<S>::bind(int layer, const Layout& layout, int64_t unit_lo) {
  const std::string prefix = fmt::format("h.{}.moe.", layer);
  auto at = [&](const std::string& name) { return layout.find(prefix + name).offset - unit_lo; };
  Weights& w = w_[layer];
  w = Weights{};
  w.router_w = at("router.weight");
  const int el = c_.experts / ep_.size;
  for (int e = ep_.rank * el; e < (ep_.rank + 1) * el; ++e) {
    const std::string p = fmt::format("expert.{}.", e);
    w.fc_w.push_back(at(p + "fc.weight"));
    w.fc_b.push_back(at(p + "fc.bias"));
    w.proj_w.push_back(at(p + "proj.weight"));
    w.proj_b.push_back(at(p + "proj.bias"));
  }
}

template <typename S>
void MoeMlp<S>::add_acts(int layer, Layout& acts, const std::string& prefix) {
  const int64_t C = c_.hidden, F = c_.ffn, E = c_.experts, k = c_.top_k, N = c_.tokens(),
                R = moe_rows(c_), RL = moe_local_rows(c_, ep_);
  Acts& a = a_[layer];
  a.probs = acts.add(prefix + "moe.probs", {N, E}, false);  // the logits, then softmax in place
  a.gates = acts.add(prefix + "moe.gates", {N, k}, false);
  a.prob_sum = acts.add(prefix + "moe.prob_sum", {E}, false);
  a.xp = acts.add(prefix + "moe.xp", {R, C}, false);
  const int64_t T = ep_.etp, Fe = F / T;
  a.h = acts.add(prefix + "moe.fch", {T * RL, Fe}, false);
  a.hg = acts.add(prefix + "moe.fch_gelu", {T * RL, Fe}, false);
  a.yp = acts.add(prefix + "moe.yp", {R, C}, false);
  const bool ep = ep_.size > 1;
  a.xl = ep ? acts.add(prefix + "moe.x_local", {RL, C}, false) : a.xp;
  a.yl = ep ? acts.add(prefix + "moe.y_local", {RL, C}, false) : a.yp;
  a.xg = T > 1 ? acts.add(prefix + "moe.x_gathered", {T * RL, C}, false) : a.xl;
  a.yg = T > 1 ? acts.add(prefix + "moe.y_gathered", {T * RL, C}, false) : a.yl;
  a.idx = ints_total_;
  a.slot = a.idx + N * k;
  a.counts = a.slot + N * k;
  a.lslot = a.counts + 2 * E + 1;
  ints_total_ = a.lslot + (ep ? RL : 0);
}

template <typename S>
void MoeMlp<S>::allocate(Backend<S>& be, MemoryTracker* mem, int copies) {
  be_ = &be;
  if (c_.moe_blocks() == 0) return;
  const int64_t C = c_.hidden, F = c_.ffn, E = c_.experts, k = c_.top_k, N = c_.tokens(),
                R = moe_rows(c_), RL = moe_local_rows(c_, ep_);
  copies_ = std::max(1, copies);  // one routing state per micro-batch in flight
  routing_.assign(static_cast<size_t>(c_.layers) * copies_, MoeRouting{});
  ints_ = BackendArray<int32_t, S>(be, ints_total_ * copies_, mem, MemCat::kActivations);
  const MemCat kBuf = MemCat::kBuffers;
  dlogits_ = BackendArray<S, S>(be, N * E, mem, kBuf);
  dgates_ = BackendArray<S, S>(be, N * k, mem, kBuf);
  dyp_ = BackendArray<S, S>(be, R * C, mem, kBuf);
  dh_ = BackendArray<S, S>(be, RL * F, mem, kBuf);  // T RL rows of F/T under expert tensor parallel
  if (ep_.etp > 1) {
    const int64_t T = ep_.etp;
    dyg_ = BackendArray<S, S>(be, T * RL * C, mem, kBuf);
    etp_cnt_ = BackendArray<S, S>(be, (T + 1) * (E / ep_.size), mem, kBuf);
    zero_c_ = BackendArray<S, S>(be, C, mem, kBuf);
  }
  if (tok_.parts > 1) stats_ = BackendArray<S, S>(be, 2 * E, mem, kBuf);
  if (ep_.size > 1) {
    recv_ = BackendArray<S, S>(be, RL * C, mem, kBuf);
    dyl_ = BackendArray<S, S>(be, RL * C, mem, kBuf);
    cnt_ = BackendArray<S, S>(be, 2 * E, mem, kBuf);
  }
  dxr_ = BackendArray<S, S>(be, N * C, mem, kBuf);
  dprobs_ = BackendArray<S, S>(be, E, mem, kBuf);
  zero_bias_ = BackendArray<S, S>(be, E, mem, kBuf);  // the router has no bias
  dbias_scratch_ = BackendArray<S, S>(be, E, mem, kBuf);
}

template <typename S>
template <typename F>
void MoeMlp<S>::each_expert(int layer, F&& f) const {
  for (const auto& [e, r0, rows] : route(layer).runs) f(static_cast<int>(e), r0, rows);
}

template <typename S>
void MoeMlp<S>::plan_runs(int layer, S* acts) {
  MoeRouting& r = route(layer);
  r.runs.clear();
  const int el = static_cast<int>(r.local.size()) - 1;
  if (ep_.etp <= 1) {  // the local rows, expert-major
    for (int j = 0; j < el; ++j)
      if (r.local[j + 1] > r.local[j]) r.runs.push_back({j, r.local[j], r.local[j + 1] - r.local[j]});
    r.block = r.computed = r.local_rows();
    return;
  }
  // Expert tensor parallel: the group's rows per local expert, then the rows themselves, each
  // rank's block padded to the group's largest.
  const int T = ep_.etp, C = c_.hidden;
  std::vector<S> counts(static_cast<size_t>(T + 1) * el);
  for (int j = 0; j < el; ++j) counts[size_t(j)] = static_cast<S>(r.local[j + 1] - r.local[j]);
  be_->upload(etp_cnt_.data(), counts.data(), sizeof(S) * el);
  etp_->set_layer(layer);
  etp_->all_gather(etp_cnt_.data() + el, etp_cnt_.data(), el);
  be_->download(counts.data() + el, etp_cnt_.data() + el, sizeof(S) * T * el);
  int64_t block = 0;
  for (int q = 0; q < T; ++q) {
    int64_t rows = 0;
    for (int j = 0; j < el; ++j) rows += static_cast<int64_t>(counts[size_t((q + 1) * el + j)]);
    block = std::max(block, rows);
  }
  for (int q = 0; q < T; ++q) {
    int64_t row = q * block;
    for (int j = 0; j < el; ++j) {
      const int64_t n = static_cast<int64_t>(counts[size_t((q + 1) * el + j)]);
      if (n > 0) r.runs.push_back({j, row, n});
      row += n;
    }
  }
  r.block = block;
  r.computed = T * block;
  totals_.ep.etp_rows += T * block;
  totals_.ep.etp_count_calls += 1;
  etp_->all_gather(acts + a_[layer].xg, acts + a_[layer].xl, block * C);
}

template <typename S>
void MoeMlp<S>::assign(int layer, S* acts, const Timed& timed) {
  const int N = static_cast<int>(c_.tokens()), E = c_.experts, k = c_.top_k;
  const Acts& a = a_[layer];
  int32_t* idx = ints() + a.idx;
  const bool fixed = static_cast<bool>(assignment_);
  if (fixed) {
    host_idx_.resize(static_cast<size_t>(N) * k);
    assignment_(layer, tokens_, step_, host_idx_.data());
    for (int n = 0; n < N; ++n)  // the ops index experts by it: a bad one would write anywhere
      for (int j = 0; j < k; ++j) {
        const int32_t e = host_idx_[size_t(n) * k + j];
        bool repeated = false;
        for (int i = 0; i < j; ++i) repeated = repeated || host_idx_[size_t(n) * k + i] == e;
        if (e < 0 || e >= E || repeated)
          throw std::invalid_argument(fmt::format(
              "MoE fixed assignment, block {} token {}: expert {} (want distinct experts in [0, {}))",
              layer, n, e, E));
      }
    be_->upload(idx, host_idx_.data(), sizeof(int32_t) * host_idx_.size());
  }
  timed({Op::kRouter, "", 0, 0, 0, 0.0}, [&] {
    S* probs = acts + a.probs;
    be_->moe_topk_forward(idx, acts + a.gates, probs, probs, N, E, k, fixed);
  });
}

template <typename S>
double MoeMlp<S>::forward(int layer, const S* p, S* acts, const S* x, S* out,
                          const Timed& timed) {
  const int N = static_cast<int>(c_.tokens()), C = c_.hidden, E = c_.experts, k = c_.top_k;
  Backend<S>& be = *be_;
  const Weights& w = w_[layer];
  const Acts& a = a_[layer];
  int32_t* slot = ints() + a.slot;
  int32_t* counts = ints() + a.counts;
  timed({Op::kMatmul, "router.fwd", N, E, C, 2.0 * N * C * E}, [&] {
    be.matmul_forward(acts + a.probs, x, p + w.router_w, zero_bias_.data(), N, C, E, false);
  });
  assign(layer, acts, timed);
  timed({Op::kRouter, "", 0, 0, 0, 0.0}, [&] {
    be.moe_plan(slot, counts, acts + a.prob_sum, ints() + a.idx, acts + a.probs, N, E, k,
                moe_capacity(c_));
  });
  // The host reads the counts (it sizes the expert GEMMs) and the probability sums (aux).
  MoeRouting& r = route(layer);
  std::vector<int32_t> host(static_cast<size_t>(2 * E + 1));
  std::vector<S> psum(static_cast<size_t>(E));
  be.download(host.data(), counts, sizeof(int32_t) * host.size());
  be.download(psum.data(), acts + a.prob_sum, sizeof(S) * psum.size());
  r.routed.assign(host.begin(), host.begin() + E);
  r.offsets.assign(host.begin() + E, host.end());
  r.prob_sum.assign(psum.begin(), psum.end());
  int64_t routed_total = 0;
  for (int e = 0; e < E; ++e) routed_total += r.routed[e];
  r.dropped = routed_total - r.kept();
  totals_.routed += routed_total;
  totals_.dropped += r.dropped;
  totals_.forwards += 1;
  for (int e = 0; e < E; ++e)
    totals_.worst_expert = std::max<int64_t>(totals_.worst_expert, r.offsets[e + 1] - r.offsets[e]);
  sum_over_token_groups(r);  // the micro-batch's counts and sums (a token split adds the other ranks')
  double fp = 0;
  for (int e = 0; e < E; ++e) fp += r.routed_all[e] * r.prob_sum[e];
  const double T = static_cast<double>(total_);
  r.aux = c_.aux_loss_coef * E * fp / (T * T * k);

  if (sliced()) restrict_to_slice(layer);
  timed({Op::kPermute, "", 0, 0, 0, 0.0}, [&] { be.moe_permute_forward(acts + a.xp, x, slot, N, C, k); });
  if (ep_.size > 1) {
    exchange_counts(layer);
    totals_.ep.dispatch_s += dispatch(layer, acts + a.xl, acts + a.xp, timed);
  } else {
    r.local = r.offsets;
  }
  plan_runs(layer, acts);  // etp > 1: the group's rows gathered
  const double t0 = core::now_seconds();
  experts_forward(layer, p, acts, timed);
  if (ep_.etp > 1) etp_->reduce_scatter(acts + a.yl, acts + a.yg, r.block * C);  // my rows, the slices summed
  totals_.ep.expert_s += core::now_seconds() - t0;
  if (ep_.size > 1) totals_.ep.combine_s += combine(layer, acts + a.yp, acts + a.yl, timed);
  if (sliced()) {  // this slice's rows, the other tp ranks' added by the all-reduce
    S* part = dxr_.data();
    be.zero(part, sizeof(S) * N * C);
    timed({Op::kPermute, "", 0, 0, 0, 0.0}, [&] { be.moe_unpermute_forward(part, acts + a.yp, acts + a.gates, slot, N, C, k); });
    tp_->all_reduce(part, int64_t{N} * C);
    timed({Op::kResidual, "", 0, 0, 0, 0.0}, [&] { be.add(out, part, int64_t{N} * C); });
    return r.aux;
  }
  timed({Op::kPermute, "", 0, 0, 0, 0.0}, [&] {
    be.moe_unpermute_forward(out, acts + a.yp, acts + a.gates, slot, N, C, k);
  });
  return r.aux;
}

template <typename S>
void MoeMlp<S>::sum_over_token_groups(MoeRouting& r) {
  const int E = c_.experts;
  r.routed_all.assign(r.routed.begin(), r.routed.end());
  if (tok_.parts <= 1) return;
  std::vector<S> host(static_cast<size_t>(2 * E));
  for (int e = 0; e < E; ++e) {
    host[size_t(e)] = static_cast<S>(r.routed[e]);  // exact: counts below 2^24
    host[size_t(E + e)] = static_cast<S>(r.prob_sum[e]);
  }
  be_->upload(stats_.data(), host.data(), sizeof(S) * host.size());
  for (GroupComm<S>* g : {split_tp_, split_cp_})
    if (g != nullptr && g->size() > 1) g->all_reduce(stats_.data(), 2 * int64_t{E});
  be_->download(host.data(), stats_.data(), sizeof(S) * host.size());
  for (int e = 0; e < E; ++e) {
    r.routed_all[size_t(e)] = static_cast<double>(host[size_t(e)]);
    r.prob_sum[size_t(e)] = static_cast<double>(host[size_t(E + e)]);
  }
}

template <typename S>
bool MoeMlp<S>::sliced() const {
  return (ep_.size > 1 || ep_.etp > 1) && tp_ != nullptr && tp_->size() > 1 && !tok_.sp;
}

template <typename S>
void MoeMlp<S>::restrict_to_slice(int layer) {
  const int N = static_cast<int>(c_.tokens()), E = c_.experts, k = c_.top_k, t = tp_->size(), q = tp_->rank();
  const int lo = static_cast<int>(int64_t{N} * q / t), hi = static_cast<int>(int64_t{N} * (q + 1) / t);
  const Acts& a = a_[layer];
  std::vector<int32_t> slot(static_cast<size_t>(N) * k), idx(slot.size());
  be_->download(slot.data(), ints() + a.slot, sizeof(int32_t) * slot.size());
  be_->download(idx.data(), ints() + a.idx, sizeof(int32_t) * idx.size());
  std::vector<int32_t> off(static_cast<size_t>(E + 1), 0);
  for (int n = lo; n < hi; ++n)
    for (int j = 0; j < k; ++j)
      if (slot[size_t(n) * k + j] >= 0) ++off[size_t(idx[size_t(n) * k + j]) + 1];
  for (int e = 0; e < E; ++e) off[size_t(e + 1)] += off[size_t(e)];
  std::vector<int32_t> next(off.begin(), off.end() - 1);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < k; ++j) {
      int32_t& s = slot[size_t(n) * k + j];
      s = (n >= lo && n < hi && s >= 0) ? next[size_t(idx[size_t(n) * k + j])]++ : -1;
    }
  be_->upload(ints() + a.slot, slot.data(), sizeof(int32_t) * slot.size());
  route(layer).offsets = off;
}

template <typename S>
void MoeMlp<S>::exchange_counts(int layer) {
  const int E = c_.experts, P = ep_.size, el = E / P;
  MoeRouting& r = route(layer);
  std::vector<S> send(static_cast<size_t>(E)), recv(send.size());
  for (int e = 0; e < E; ++e) send[size_t(e)] = static_cast<S>(r.offsets[e + 1] - r.offsets[e]);
  be_->upload(cnt_.data(), send.data(), sizeof(S) * send.size());
  comm_->set_layer(layer);
  const double t0 = core::now_seconds();
  comm_->all_to_all(cnt_.data() + E, cnt_.data(), el);  // peer q gets the counts of its experts
  totals_.ep.counts_s += core::now_seconds() - t0;
  totals_.ep.count_calls += 1;
  be_->download(recv.data(), cnt_.data() + E, sizeof(S) * recv.size());
  r.recv.assign(recv.begin(), recv.end());
  r.local.assign(static_cast<size_t>(el + 1), 0);
  for (int j = 0; j < el; ++j) {
    int32_t sum = 0;
    for (int q = 0; q < P; ++q) sum += r.recv[size_t(q * el + j)];
    r.local[size_t(j + 1)] = r.local[size_t(j)] + sum;
  }
  // Received rows arrive source-major (then expert, then token order); the experts read them
  // expert-major (then source): lslot[i] is received row i's place.
  std::vector<int32_t> lslot(static_cast<size_t>(r.local_rows()));
  std::vector<int32_t> next(r.local.begin(), r.local.end() - 1);
  size_t i = 0;
  for (int q = 0; q < P; ++q)
    for (int j = 0; j < el; ++j)
      for (int32_t n = 0; n < r.recv[size_t(q * el + j)]; ++n) lslot[i++] = next[size_t(j)]++;
  be_->upload(ints() + a_[layer].lslot, lslot.data(), sizeof(int32_t) * lslot.size());
  const int64_t own_sent = r.offsets[(ep_.rank + 1) * el] - r.offsets[ep_.rank * el];
  int64_t own_recv = 0;
  for (int j = 0; j < el; ++j) own_recv += r.recv[size_t(ep_.rank * el + j)];
  EpTotals& t = totals_.ep;
  t.rows_sent += r.kept();
  t.rows_recv += r.local_rows();
  t.remote_sent += r.kept() - own_sent;
  t.remote_recv += r.local_rows() - own_recv;
}

template <typename S>
void MoeMlp<S>::dispatch_sizes(int layer, std::vector<int64_t>& send, std::vector<int64_t>& recv) const {
  const int P = ep_.size, el = c_.experts / P;
  const MoeRouting& r = route(layer);
  send.assign(static_cast<size_t>(P), 0);
  recv.assign(static_cast<size_t>(P), 0);
  for (int q = 0; q < P; ++q) {
    send[size_t(q)] = int64_t{r.offsets[(q + 1) * el] - r.offsets[q * el]} * c_.hidden;
    for (int j = 0; j < el; ++j) recv[size_t(q)] += int64_t{r.recv[size_t(q * el + j)]} * c_.hidden;
  }
}

template <typename S>
double MoeMlp<S>::dispatch(int layer, S* local, const S* permuted, const Timed& timed) {
  std::vector<int64_t> sn, rn;
  dispatch_sizes(layer, sn, rn);
  S* rows = recv_.data();  // source-major
  comm_->set_layer(layer);
  const double t0 = core::now_seconds();
  comm_->all_to_allv(rows, rn, permuted, sn);
  const double t1 = core::now_seconds();
  const int n = static_cast<int>(route(layer).local_rows());
  const int32_t* lslot = ints() + a_[layer].lslot;
  timed({Op::kPermute, "", 0, 0, 0, 0.0}, [&] { be_->moe_permute_forward(local, rows, lslot, n, c_.hidden, 1); });
  return t1 - t0;
}

template <typename S>
double MoeMlp<S>::combine(int layer, S* permuted, const S* local, const Timed& timed) {
  std::vector<int64_t> sn, rn;
  dispatch_sizes(layer, sn, rn);
  S* rows = recv_.data();  // source-major
  const int n = static_cast<int>(route(layer).local_rows());
  const int32_t* lslot = ints() + a_[layer].lslot;
  timed({Op::kPermute, "", 0, 0, 0, 0.0}, [&] { be_->moe_permute_backward(rows, local, lslot, n, c_.hidden, 1); });
  comm_->set_layer(layer);
  const double t0 = core::now_seconds();
  comm_->all_to_allv(permuted, sn, rows, rn);
  return core::now_seconds() - t0;
}

template <typename S>
void MoeMlp<S>::experts_forward(int layer, const S* p, S* acts, const Timed& timed) {
  const int C = c_.hidden, F = c_.ffn / ep_.etp;  // F: this rank's slice under expert tensor parallel
  Backend<S>& be = *be_;
  const Weights& w = w_[layer];
  const Acts& a = a_[layer];
  const bool bias = ep_.etp_rank == 0;  // proj's bias added once over the etp group's partial sums
  each_expert(layer, [&](int e, int64_t r0, int64_t rows) {
    timed({Op::kMatmul, "expert.fc.fwd", static_cast<int>(rows), F, C, 2.0 * static_cast<double>(rows) * C * F}, [&] {
      be.matmul_forward(acts + a.h + r0 * F, acts + a.xg + r0 * C, p + w.fc_w[e], p + w.fc_b[e],
                        static_cast<int>(rows), C, F, false);
    });
  });
  timed({Op::kGelu, "", 0, 0, 0, 0.0}, [&] { be.gelu_forward(acts + a.hg, acts + a.h, route(layer).computed * F); });
  each_expert(layer, [&](int e, int64_t r0, int64_t rows) {
    timed({Op::kMatmul, "expert.proj.fwd", static_cast<int>(rows), C, F, 2.0 * static_cast<double>(rows) * F * C}, [&] {
      be.matmul_forward(acts + a.yg + r0 * C, acts + a.hg + r0 * F, p + w.proj_w[e],
                        bias ? p + w.proj_b[e] : zero_c_.data(), static_cast<int>(rows), F, C, false);
    });
  });
  if (ep_.size > 1 || ep_.etp > 1) be.synchronize();  // the expert time ends with the experts' work
}

// d: d(y) of the computed rows in, d(x) out, in place.
template <typename S>
void MoeMlp<S>::experts_backward(int layer, const S* p, S* g, S* acts, S* d, const Timed& timed) {
  const int C = c_.hidden, F = c_.ffn / ep_.etp;
  Backend<S>& be = *be_;
  const Weights& w = w_[layer];
  const Acts& a = a_[layer];
  S* dh = dh_.data();
  each_expert(layer, [&](int e, int64_t r0, int64_t rows) {
    timed({Op::kMatmul, "expert.proj.bwd", static_cast<int>(rows), C, F, 4.0 * static_cast<double>(rows) * F * C}, [&] {
      be.matmul_backward(dh + r0 * F, g + w.proj_w[e], g + w.proj_b[e], d + r0 * C,
                         acts + a.hg + r0 * F, p + w.proj_w[e], static_cast<int>(rows), F, C);
    });
  });
  timed({Op::kGelu, "", 0, 0, 0, 0.0}, [&] { be.gelu_backward(dh, acts + a.h, dh, route(layer).computed * F); });
  each_expert(layer, [&](int e, int64_t r0, int64_t rows) {
    timed({Op::kMatmul, "expert.fc.bwd", static_cast<int>(rows), F, C, 4.0 * static_cast<double>(rows) * C * F}, [&] {
      be.matmul_backward(d + r0 * C, g + w.fc_w[e], g + w.fc_b[e], dh + r0 * F,
                         acts + a.xg + r0 * C, p + w.fc_w[e], static_cast<int>(rows), C, F);
    });
  });
  if (ep_.size > 1 || ep_.etp > 1) be.synchronize();
}

template <typename S>
void MoeMlp<S>::backward(int layer, const S* p, S* g, S* acts, const S* x, const S* dout, S* dx,
                         S loss_scale, const Timed& timed) {
  const int N = static_cast<int>(c_.tokens()), C = c_.hidden, E = c_.experts, k = c_.top_k;
  Backend<S>& be = *be_;
  const Weights& w = w_[layer];
  const Acts& a = a_[layer];
  const MoeRouting& r = route(layer);
  const int32_t* slot = ints() + a.slot;
  S* dyp = dyp_.data();  // d(yp), then d(xp), in the sender's permuted layout
  const bool ep = ep_.size > 1;
  S* dyl = ep ? dyl_.data() : dyp;  // the local experts' rows: d(yl), then d(xl) in place
  timed({Op::kPermute, "", 0, 0, 0, 0.0}, [&] {
    be.moe_unpermute_backward(dyp, dgates_.data(), dout, acts + a.yp, acts + a.gates, slot, N, C, k);
  });
  if (sliced()) tp_->all_reduce(dgates_.data(), int64_t{N} * k);  // the other slices' gates
  if (ep) totals_.ep.dispatch_s += dispatch(layer, dyl, dyp, timed);
  const double t0 = core::now_seconds();
  if (ep_.etp > 1) {  // the group's d(y) gathered, d(x) of every gathered row, reduce-scattered back
    const int64_t n = route(layer).block * C;
    etp_->set_layer(layer);
    etp_->all_gather(dyg_.data(), dyl, n);
    experts_backward(layer, p, g, acts, dyg_.data(), timed);
    etp_->reduce_scatter(dyl, dyg_.data(), n);
  } else {
    experts_backward(layer, p, g, acts, dyl, timed);
  }
  totals_.ep.expert_s += core::now_seconds() - t0;
  if (ep) totals_.ep.combine_s += combine(layer, dyp, dyl, timed);
  timed({Op::kPermute, "", 0, 0, 0, 0.0}, [&] { be.moe_permute_backward(dx, dyp, slot, N, C, k); });
  if (sliced()) tp_->all_reduce(dx, int64_t{N} * C);  // this slice's rows, the others' added
  // d aux / d probs[n, e] = coef * E * routed_e / (N^2 k) over the micro-batch's N tokens and
  // counts, times the loss scale; under context parallel the scale holds 1/cp, which this
  // rank's share of a micro-batch-wide term does not have, so times cp.
  std::vector<S> dprobs(static_cast<size_t>(E));
  const double T = static_cast<double>(total_);
  for (int e = 0; e < E; ++e)
    dprobs[e] = static_cast<S>(static_cast<double>(loss_scale) * tok_.cp * c_.aux_loss_coef * E *
                               r.routed_all[e] / (T * T * k));
  be.upload(dprobs_.data(), dprobs.data(), sizeof(S) * dprobs.size());
  timed({Op::kRouter, "", 0, 0, 0, 0.0}, [&] {
    be.moe_topk_backward(dlogits_.data(), dgates_.data(), dprobs_.data(), acts + a.probs,
                         acts + a.gates, ints() + a.idx, N, E, k);
  });
  timed({Op::kMatmul, "router.bwd", N, E, C, 4.0 * N * C * E}, [&] {
    be.matmul_backward(dxr_.data(), g + w.router_w, dbias_scratch_.data(), dlogits_.data(), x,
                       p + w.router_w, N, C, E);
  });
  timed({Op::kResidual, "", 0, 0, 0, 0.0}, [&] { be.add(dx, dxr_.data(), int64_t{N} * C); });
}

template class MoeMlp<float>;
template class MoeMlp<double>;

}  // namespace meshbench::parallel
