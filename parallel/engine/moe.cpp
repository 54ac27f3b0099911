// MoeMlp<S>: the MoE blocks' layout entries, buffers and forward/backward wiring (moe.hpp).
#include "moe.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/core.h>

#include "model.hpp"

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

MoeMemory moe_memory(const GptConfig& c, int64_t sb) {
  MoeMemory m;
  const int64_t L = c.moe_blocks();
  if (L == 0) return m;
  const int64_t C = c.hidden, F = c.ffn, E = c.experts, k = c.top_k, N = c.tokens(),
                R = moe_rows(c);
  const int64_t dense_mlp = F * C + F + C * F + C;
  m.param_elements = L * (E * C + E * dense_mlp - dense_mlp);
  // per MoE block: probs (N,E), gates (N,k), prob_sum (E), xp, yp (R,C), h, hg (R,F) in S;
  // idx, slot (N,k) and counts (2E+1) in int32; the dense block's fch, fch_gelu are gone.
  m.activation_bytes =
      L * ((N * E + N * k + E + 2 * R * C + 2 * R * F - 2 * N * F) * sb + (2 * N * k + 2 * E + 1) * 4);
  // dlogits (N,E), dgates (N,k), dyp (R,C), dh (R,F), dxr (N,C), dprobs, zero bias, dbias (E)
  m.buffer_bytes = (N * E + N * k + R * C + R * F + N * C + 3 * E) * sb;
  return m;
}

void moe_add_params(Layout& layout, const GptConfig& c, const std::string& prefix) {
  const int64_t C = c.hidden, F = c.ffn, E = c.experts;
  layout.add(prefix + "moe.router.weight", {E, C}, true);
  for (int64_t e = 0; e < E; ++e) {
    // The global expert index: an expert-parallel rank's entries match the full model's.
    const std::string p = fmt::format("{}moe.expert.{}.", prefix, e);
    layout.add(p + "fc.weight", {F, C}, true);
    layout.add(p + "fc.bias", {F}, false);
    layout.add(p + "proj.weight", {C, F}, true);
    layout.add(p + "proj.bias", {C}, false);
  }
}

template <typename S>
void MoeMlp<S>::bind(int layer, const Layout& layout, int64_t unit_lo) {
  const std::string prefix = fmt::format("h.{}.moe.", layer);
  auto at = [&](const std::string& name) { return layout.find(prefix + name).offset - unit_lo; };
  Weights& w = w_[layer];
  w = Weights{};
  w.router_w = at("router.weight");
  for (int e = 0; e < c_.experts; ++e) {
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
                R = moe_rows(c_);
  Acts& a = a_[layer];
  a.probs = acts.add(prefix + "moe.probs", {N, E}, false);  // the logits, then softmax in place
  a.gates = acts.add(prefix + "moe.gates", {N, k}, false);
  a.prob_sum = acts.add(prefix + "moe.prob_sum", {E}, false);
  a.xp = acts.add(prefix + "moe.xp", {R, C}, false);
  a.h = acts.add(prefix + "moe.fch", {R, F}, false);
  a.hg = acts.add(prefix + "moe.fch_gelu", {R, F}, false);
  a.yp = acts.add(prefix + "moe.yp", {R, C}, false);
  a.idx = ints_total_;
  a.slot = a.idx + N * k;
  a.counts = a.slot + N * k;
  ints_total_ = a.counts + 2 * E + 1;
}

template <typename S>
void MoeMlp<S>::allocate(Backend<S>& be, MemoryTracker* mem) {
  be_ = &be;
  if (c_.moe_blocks() == 0) return;
  const int64_t C = c_.hidden, F = c_.ffn, E = c_.experts, k = c_.top_k, N = c_.tokens(),
                R = moe_rows(c_);
  ints_ = BackendArray<int32_t, S>(be, ints_total_, mem, MemCat::kActivations);
  const MemCat kBuf = MemCat::kBuffers;
  dlogits_ = BackendArray<S, S>(be, N * E, mem, kBuf);
  dgates_ = BackendArray<S, S>(be, N * k, mem, kBuf);
  dyp_ = BackendArray<S, S>(be, R * C, mem, kBuf);
  dh_ = BackendArray<S, S>(be, R * F, mem, kBuf);
  dxr_ = BackendArray<S, S>(be, N * C, mem, kBuf);
  dprobs_ = BackendArray<S, S>(be, E, mem, kBuf);
  zero_bias_ = BackendArray<S, S>(be, E, mem, kBuf);  // the router has no bias
  dbias_scratch_ = BackendArray<S, S>(be, E, mem, kBuf);
}

template <typename S>
template <typename F>
void MoeMlp<S>::each_expert(int layer, F&& f) const {
  const std::vector<int32_t>& off = routing_[layer].offsets;
  for (int e = 0; e < c_.experts; ++e)
    if (off[e + 1] > off[e]) f(e, int64_t{off[e]}, off[e + 1] - off[e]);
}

template <typename S>
void MoeMlp<S>::assign(int layer, S* acts, const Timed& timed) {
  const int N = static_cast<int>(c_.tokens()), E = c_.experts, k = c_.top_k;
  const Acts& a = a_[layer];
  int32_t* idx = ints_.data() + a.idx;
  const bool fixed = static_cast<bool>(assignment_);
  if (fixed) {
    host_idx_.resize(static_cast<size_t>(N) * k);
    assignment_(layer, host_idx_.data());
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
  timed(Op::kRouter, [&] {
    S* probs = acts + a.probs;
    be_->moe_topk_forward(idx, acts + a.gates, probs, probs, N, E, k, fixed);
  }, 0.0);
}

template <typename S>
double MoeMlp<S>::forward(int layer, const S* p, S* acts, const S* x, S* out,
                          const Timed& timed) {
  const int N = static_cast<int>(c_.tokens()), C = c_.hidden, F = c_.ffn, E = c_.experts,
            k = c_.top_k;
  Backend<S>& be = *be_;
  const Weights& w = w_[layer];
  const Acts& a = a_[layer];
  int32_t* slot = ints_.data() + a.slot;
  int32_t* counts = ints_.data() + a.counts;
  timed(Op::kMatmul, [&] {
    be.matmul_forward(acts + a.probs, x, p + w.router_w, zero_bias_.data(), N, C, E, false);
  }, 2.0 * N * C * E);
  assign(layer, acts, timed);
  timed(Op::kRouter, [&] {
    be.moe_plan(slot, counts, acts + a.prob_sum, ints_.data() + a.idx, acts + a.probs, N, E, k,
                moe_capacity(c_));
  }, 0.0);
  // The host reads the counts (it sizes the expert GEMMs) and the probability sums (aux).
  MoeRouting& r = routing_[layer];
  std::vector<int32_t> host(static_cast<size_t>(2 * E + 1));
  std::vector<S> psum(static_cast<size_t>(E));
  be.download(host.data(), counts, sizeof(int32_t) * host.size());
  be.download(psum.data(), acts + a.prob_sum, sizeof(S) * psum.size());
  r.routed.assign(host.begin(), host.begin() + E);
  r.offsets.assign(host.begin() + E, host.end());
  r.prob_sum.assign(psum.begin(), psum.end());
  double fp = 0;
  int64_t routed_total = 0;
  for (int e = 0; e < E; ++e) {
    fp += r.routed[e] * r.prob_sum[e];
    routed_total += r.routed[e];
  }
  r.dropped = routed_total - r.kept();
  totals_.routed += routed_total;
  totals_.dropped += r.dropped;
  totals_.forwards += 1;
  for (int e = 0; e < E; ++e)
    totals_.worst_expert = std::max<int64_t>(totals_.worst_expert, r.offsets[e + 1] - r.offsets[e]);
  r.aux = c_.aux_loss_coef * E * fp / (static_cast<double>(N) * N * k);

  timed(Op::kPermute, [&] { be.moe_permute_forward(acts + a.xp, x, slot, N, C, k); }, 0.0);
  each_expert(layer, [&](int e, int64_t r0, int64_t rows) {
    timed(Op::kMatmul, [&] {
      be.matmul_forward(acts + a.h + r0 * F, acts + a.xp + r0 * C, p + w.fc_w[e], p + w.fc_b[e],
                        static_cast<int>(rows), C, F, false);
    }, 2.0 * static_cast<double>(rows) * C * F);
  });
  timed(Op::kGelu, [&] { be.gelu_forward(acts + a.hg, acts + a.h, r.kept() * F); }, 0.0);
  each_expert(layer, [&](int e, int64_t r0, int64_t rows) {
    timed(Op::kMatmul, [&] {
      be.matmul_forward(acts + a.yp + r0 * C, acts + a.hg + r0 * F, p + w.proj_w[e],
                        p + w.proj_b[e], static_cast<int>(rows), F, C, false);
    }, 2.0 * static_cast<double>(rows) * F * C);
  });
  timed(Op::kPermute, [&] {
    be.moe_unpermute_forward(out, acts + a.yp, acts + a.gates, slot, N, C, k);
  }, 0.0);
  return r.aux;
}

template <typename S>
void MoeMlp<S>::backward(int layer, const S* p, S* g, S* acts, const S* x, const S* dout, S* dx,
                         S loss_scale, const Timed& timed) {
  const int N = static_cast<int>(c_.tokens()), C = c_.hidden, F = c_.ffn, E = c_.experts,
            k = c_.top_k;
  Backend<S>& be = *be_;
  const Weights& w = w_[layer];
  const Acts& a = a_[layer];
  const MoeRouting& r = routing_[layer];
  const int32_t* slot = ints_.data() + a.slot;
  S* dyp = dyp_.data();  // d(yp), then d(xp) in place (each expert's rows)
  S* dh = dh_.data();
  timed(Op::kPermute, [&] {
    be.moe_unpermute_backward(dyp, dgates_.data(), dout, acts + a.yp, acts + a.gates, slot, N, C, k);
  }, 0.0);
  each_expert(layer, [&](int e, int64_t r0, int64_t rows) {
    timed(Op::kMatmul, [&] {
      be.matmul_backward(dh + r0 * F, g + w.proj_w[e], g + w.proj_b[e], dyp + r0 * C,
                         acts + a.hg + r0 * F, p + w.proj_w[e], static_cast<int>(rows), F, C);
    }, 4.0 * static_cast<double>(rows) * F * C);
  });
  timed(Op::kGelu, [&] { be.gelu_backward(dh, acts + a.h, dh, r.kept() * F); }, 0.0);
  each_expert(layer, [&](int e, int64_t r0, int64_t rows) {
    timed(Op::kMatmul, [&] {
      be.matmul_backward(dyp + r0 * C, g + w.fc_w[e], g + w.fc_b[e], dh + r0 * F,
                         acts + a.xp + r0 * C, p + w.fc_w[e], static_cast<int>(rows), C, F);
    }, 4.0 * static_cast<double>(rows) * C * F);
  });
  timed(Op::kPermute, [&] { be.moe_permute_backward(dx, dyp, slot, N, C, k); }, 0.0);
  // d aux / d probs[n, e] = coef * E * routed_e / (N^2 k), times the loss scale.
  std::vector<S> dprobs(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e)
    dprobs[e] = static_cast<S>(static_cast<double>(loss_scale) * c_.aux_loss_coef * E *
                               r.routed[e] / (static_cast<double>(N) * N * k));
  be.upload(dprobs_.data(), dprobs.data(), sizeof(S) * dprobs.size());
  timed(Op::kRouter, [&] {
    be.moe_topk_backward(dlogits_.data(), dgates_.data(), dprobs_.data(), acts + a.probs,
                         acts + a.gates, ints_.data() + a.idx, N, E, k);
  }, 0.0);
  timed(Op::kMatmul, [&] {
    be.matmul_backward(dxr_.data(), g + w.router_w, dbias_scratch_.data(), dlogits_.data(), x,
                       p + w.router_w, N, C, E);
  }, 4.0 * N * C * E);
  timed(Op::kResidual, [&] { be.add(dx, dxr_.data(), int64_t{N} * C); }, 0.0);
}

template <typename S>
double MoeMlp<S>::expert_flops(int layer) const {
  return 4.0 * static_cast<double>(routing_[layer].kept()) * c_.hidden * c_.ffn;
}

template class MoeMlp<float>;
template class MoeMlp<double>;

}  // namespace meshbench::parallel
