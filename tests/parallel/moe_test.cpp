// The MoE layer (issue 13, one rank): float64 finite-difference gradient checks of every MoE
// op (moe_layers.hpp) and of a whole model with MoE blocks, dropless and with capacity
// drops; exact dispatch-plan and drop accounting; the aux loss against its definition;
// configuration rules; memory accounting; the bf16 emulation backend on a MoE model.
//
// Top-k is piecewise constant, so a finite difference is only valid where no perturbation
// changes the chosen experts. The op tests draw logits whose sorted probabilities are at
// least 1e-3 apart and assert that margin (h = 1e-5 moves a logit by 1e-5); the model tests
// assert that every perturbed forward routed exactly the same per-expert counts and kept
// rows as the unperturbed one (a changed choice would also fail the 1e-6 tolerance).
#include <gtest/gtest.h>

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/backend_emulated.hpp"
#include "common/config.hpp"
#include "core/error.hpp"
#include "kernels/flops.hpp"
#include "gradcheck.hpp"
#include "model/model.hpp"
#include "expert_parallel/moe.hpp"
#include "kernels/moe_layers.hpp"

using namespace meshbench::parallel;
using meshbench::parallel::test::fd_check;
using meshbench::parallel::test::GradError;
using meshbench::parallel::test::dot;
using meshbench::parallel::test::expect_ok;
using meshbench::parallel::test::kTol;
using meshbench::parallel::test::randn;

namespace {


// The smallest gap between consecutive sorted probabilities of any row, over the first k+1.
double topk_margin(const std::vector<double>& probs, int N, int E, int k) {
  double m = 1;
  for (int n = 0; n < N; ++n) {
    std::vector<double> r(probs.begin() + int64_t{n} * E, probs.begin() + int64_t{n + 1} * E);
    std::sort(r.rbegin(), r.rend());
    for (int j = 0; j < std::min(k, E - 1); ++j) m = std::min(m, r[j] - r[j + 1]);
  }
  return m;
}

}  // namespace

TEST(MoeOps, TopkChoosesDescendingTiesToLowerIndexAndRenormalises) {
  const int N = 2, E = 4, k = 2;
  // Row 0: experts 1 and 3 tie for the top; row 1: expert 2, then 0 and 3 tie.
  std::vector<double> z{0.0, 2.0, -1.0, 2.0, 1.0, -3.0, 3.0, 1.0}, p(N * E), g(N * k);
  std::vector<int32_t> idx(N * k);
  moe_topk_forward(idx.data(), g.data(), p.data(), z.data(), N, E, k, false);
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 3, 2, 0}));
  for (int n = 0; n < N; ++n) {
    EXPECT_NEAR(std::accumulate(p.begin() + n * E, p.begin() + (n + 1) * E, 0.0), 1.0, 1e-15);
    EXPECT_NEAR(g[n * k] + g[n * k + 1], 1.0, 1e-15);
  }
  EXPECT_NEAR(g[0], 0.5, 1e-15);
  EXPECT_NEAR(g[2], std::exp(3.0) / (std::exp(3.0) + std::exp(1.0)), 1e-15);  // softmax of chosen
  // A fixed assignment keeps idx and renormalises over it.
  std::vector<int32_t> fixed{0, 2, 3, 1};
  moe_topk_forward(fixed.data(), g.data(), p.data(), z.data(), N, E, k, true);
  EXPECT_EQ(fixed, (std::vector<int32_t>{0, 2, 3, 1}));
  EXPECT_NEAR(g[0], std::exp(0.0) / (std::exp(0.0) + std::exp(-1.0)), 1e-15);
}

// The router's gradient through the renormalised top-k gates and through the full softmax
// (the aux loss's path): loss = sum(gates * Rg) + sum_n sum_e a_e probs[n, e].
TEST(MoeOps, TopkGradientThroughGatesAndProbs) {
  for (int k : {1, 2, 3}) {
    const int N = 7, E = 5;
    auto z = randn(N * E, 40 + k, 2.0), Rg = randn(N * k, 50 + k), a = randn(E, 60 + k);
    std::vector<double> p(N * E), g(N * k), dz(N * E);
    std::vector<int32_t> idx(N * k);
    const std::vector<int32_t> idx0 = [&] {
      moe_topk_forward(idx.data(), g.data(), p.data(), z.data(), N, E, k, false);
      return idx;
    }();
    ASSERT_GT(topk_margin(p, N, E, k), 1e-3) << "near tie: the finite difference is invalid";
    auto loss = [&] {
      moe_topk_forward(idx.data(), g.data(), p.data(), z.data(), N, E, k, false);
      EXPECT_EQ(idx, idx0);  // no perturbation changed the choice
      return dot(g, Rg) + [&] {
        double s = 0;
        for (int n = 0; n < N; ++n)
          for (int e = 0; e < E; ++e) s += a[e] * p[n * E + e];
        return s;
      }();
    };
    loss();
    moe_topk_backward(dz.data(), Rg.data(), a.data(), p.data(), g.data(), idx.data(), N, E, k);
    expect_ok(fd_check(loss, z.data(), dz.data(), N * E), "dlogits");
  }
}

// Token order decides who is dropped: capacity 2 over N=6 tokens, k=2, E=3.
TEST(MoeOps, PlanDropsBeyondCapacityInTokenOrder) {
  const int N = 6, E = 3, k = 2;
  const std::vector<int32_t> idx{0, 1,  0, 2,  1, 0,  0, 1,  2, 1,  2, 0};
  std::vector<double> probs(N * E, 1.0 / 3);
  std::vector<int32_t> slot(N * k), counts(2 * E + 1);
  std::vector<double> psum(E);
  // Expert 0 is chosen by tokens 0, 1, 2, 3, 5; expert 1 by 0, 2, 3, 4; expert 2 by 1, 4, 5.
  moe_plan(slot.data(), counts.data(), psum.data(), idx.data(), probs.data(), N, E, k, 2);
  EXPECT_EQ(counts, (std::vector<int32_t>{5, 4, 3, 0, 2, 4, 6}));  // routed | offsets
  EXPECT_EQ(slot, (std::vector<int32_t>{0, 2,  1, 4,  3, -1,  -1, -1,  5, -1,  -1, -1}));
  for (double s : psum) EXPECT_NEAR(s, 2.0, 1e-15);
  // Dropless: every assignment has a row, expert-major, token order inside an expert.
  moe_plan(slot.data(), counts.data(), psum.data(), idx.data(), probs.data(), N, E, k, 0);
  EXPECT_EQ(counts, (std::vector<int32_t>{5, 4, 3, 0, 5, 9, 12}));
  EXPECT_EQ(slot, (std::vector<int32_t>{0, 5,  1, 9,  6, 2,  3, 7,  10, 8,  11, 4}));
}

TEST(MoeOps, PermuteAndUnpermuteGradients) {
  const int N = 6, E = 3, k = 2, C = 5;
  const std::vector<int32_t> idx{0, 1, 0, 2, 1, 0, 0, 1, 2, 1, 2, 0};
  std::vector<double> probs(N * E, 1.0 / 3), psum(E);
  for (int capacity : {0, 2}) {
    std::vector<int32_t> slot(N * k), counts(2 * E + 1);
    moe_plan(slot.data(), counts.data(), psum.data(), idx.data(), probs.data(), N, E, k, capacity);
    const int R = counts[2 * E];
    auto x = randn(N * C, 70), Rp = randn(R * C, 71), yp = randn(R * C, 72), gates = randn(N * k, 73),
         Ro = randn(N * C, 74), base = randn(N * C, 75);
    std::vector<double> xp(R * C), dx(N * C), out(N * C), dyp(R * C), dg(N * k);
    auto lp = [&] {
      moe_permute_forward(xp.data(), x.data(), slot.data(), N, C, k);
      return dot(xp, Rp);
    };
    moe_permute_backward(dx.data(), Rp.data(), slot.data(), N, C, k);
    expect_ok(fd_check(lp, x.data(), dx.data(), N * C), "permute dx");
    auto lu = [&] {
      out = base;  // unpermute accumulates into the residual stream
      moe_unpermute_forward(out.data(), yp.data(), gates.data(), slot.data(), N, C, k);
      return dot(out, Ro);
    };
    moe_unpermute_backward(dyp.data(), dg.data(), Ro.data(), yp.data(), gates.data(), slot.data(), N, C, k);
    expect_ok(fd_check(lu, yp.data(), dyp.data(), R * C), "unpermute dyp");
    expect_ok(fd_check(lu, gates.data(), dg.data(), N * k), "unpermute dgates");
    // A dropped assignment has no row and a zero gate gradient.
    for (int a = 0; a < N * k; ++a)
      if (slot[a] < 0) EXPECT_EQ(dg[a], 0.0);
  }
}

namespace {

GptConfig tiny_moe(double capacity_factor) {
  GptConfig c;
  c.layers = 3;  // MoE, dense, MoE with moe_every 2
  c.hidden = 8;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 6;
  c.seq = 6;
  c.max_seq = 8;
  c.vocab = 11;
  c.micro_batch = 2;
  c.tied = false;
  c.experts = 4;
  c.top_k = 2;
  c.moe_every = 2;
  c.capacity_factor = capacity_factor;
  c.aux_loss_coef = 0.1;  // large enough that the aux path carries signal
  return c;
}

struct RoutingKey {
  std::vector<int32_t> routed, offsets;
  bool operator==(const RoutingKey& o) const { return routed == o.routed && offsets == o.offsets; }
};

std::vector<RoutingKey> routing_of(const Gpt<double>& m) {
  std::vector<RoutingKey> r;
  for (int l = 0; l < m.config().layers; ++l)
    if (m.config().is_moe(l)) r.push_back({m.moe().routing(l).routed, m.moe().routing(l).offsets});
  return r;
}

void moe_model_gradcheck(double capacity_factor, bool expect_drops) {
  const GptConfig c = tiny_moe(capacity_factor);
  validate(c);
  Gpt<double> m(c);
  m.init_weights(11);
  std::mt19937 g(3);
  std::normal_distribution<double> d(0.0, 0.3);
  for (const auto& e : m.layout().entries())
    for (int64_t i = 0; i < e.numel; ++i) m.params()[e.offset + i] += d(g);
  std::vector<int32_t> tok(c.tokens()), tgt(c.tokens());
  synthetic_batch(tok.data(), tgt.data(), DataKind::kRandom, 5, 0, 0, c.micro_batch, c.seq, c.vocab);
  m.zero_grad();
  m.forward(tok.data(), tgt.data());
  m.backward();
  const auto routing0 = routing_of(m);
  int64_t dropped = 0;
  double aux = 0;
  for (int l = 0; l < c.layers; ++l)
    if (c.is_moe(l)) {
      dropped += m.moe().routing(l).dropped;
      aux += m.moe().routing(l).aux;
    }
  EXPECT_EQ(dropped > 0, expect_drops);
  EXPECT_GT(aux, 0.0);
  std::vector<double> ana(m.grads(), m.grads() + m.layout().total());
  int64_t changed = 0;
  auto loss = [&] {
    const double l = static_cast<double>(m.forward(tok.data(), tgt.data()));
    changed += routing_of(m) == routing0 ? 0 : 1;
    return l;
  };
  for (const auto& e : m.layout().entries()) {
    const auto err = test::fd_check(loss, m.params() + e.offset, ana.data() + e.offset, e.numel);
    EXPECT_LT(err.norm_rel, 1e-6) << e.name;
    EXPECT_LT(err.worst_rel, 1e-6) << e.name;
  }
  EXPECT_EQ(changed, 0) << "a perturbation changed the routing: the finite difference is invalid";
  // The routers have a gradient; an expert has one exactly when it kept rows.
  auto grad_norm = [&](const std::string& n) {
    const auto& e = m.layout().find(n);
    double s = 0;
    for (int64_t i = 0; i < e.numel; ++i) s += std::abs(ana[e.offset + i]);
    return s;
  };
  for (int l : {0, 2}) {
    EXPECT_GT(grad_norm(fmt::format("h.{}.moe.router.weight", l)), 0.0);
    const auto& off = m.moe().routing(l).offsets;
    for (int e = 0; e < c.experts; ++e)
      EXPECT_EQ(grad_norm(fmt::format("h.{}.moe.expert.{}.proj.bias", l, e)) > 0, off[e + 1] > off[e])
          << "block " << l << " expert " << e;
  }
}

}  // namespace

TEST(MoeModelGrad, Dropless) { moe_model_gradcheck(0.0, false); }
TEST(MoeModelGrad, CapacityDrops) { moe_model_gradcheck(0.5, true); }

// The aux loss as defined (moe.hpp) from the recorded counts and probability sums; the
// drops are the routed assignments beyond capacity, exactly.
TEST(MoeModel, AuxLossAndDropAccounting) {
  GptConfig c = tiny_moe(0.75);
  Gpt<double> m(c);
  m.init_weights(2);
  std::vector<int32_t> tok(c.tokens()), tgt(c.tokens());
  synthetic_batch(tok.data(), tgt.data(), DataKind::kRandom, 9, 0, 0, c.micro_batch, c.seq, c.vocab);
  const double with_aux = m.forward(tok.data(), tgt.data());
  const int N = static_cast<int>(c.tokens()), E = c.experts, k = c.top_k;
  const int cap = moe_capacity(c);
  EXPECT_EQ(cap, static_cast<int>(std::ceil(0.75 * N * k / E)));
  double aux = 0;
  for (int l : {0, 2}) {
    const MoeRouting& r = m.moe().routing(l);
    int64_t routed = 0, dropped = 0;
    double fp = 0;
    for (int e = 0; e < E; ++e) {
      routed += r.routed[e];
      dropped += std::max(0, r.routed[e] - cap);
      EXPECT_EQ(r.offsets[e + 1] - r.offsets[e], std::min(r.routed[e], cap));
      fp += (double(r.routed[e]) / (N * k)) * (r.prob_sum[e] / N);
    }
    EXPECT_EQ(routed, int64_t{N} * k);
    EXPECT_EQ(r.dropped, dropped);
    EXPECT_NEAR(r.aux, c.aux_loss_coef * E * fp, 1e-15);
    aux += r.aux;
  }
  c.aux_loss_coef = 0;
  Gpt<double> m0(c);
  m0.init_weights(2);
  EXPECT_NEAR(with_aux - m0.forward(tok.data(), tgt.data()), aux, 1e-12);
}

// A fixed assignment replaces the router's top-k (the hook the routing workloads use).
TEST(MoeModel, FixedAssignmentRoutesAsGiven) {
  const GptConfig c = tiny_moe(0.0);
  Gpt<double> m(c);
  m.init_weights(2);
  m.moe().set_assignment([&](int, const int32_t*, int, int32_t* idx) {
    for (int64_t n = 0; n < c.tokens(); ++n) {
      idx[n * 2] = 3;
      idx[n * 2 + 1] = static_cast<int32_t>(n % 3);
    }
  });
  std::vector<int32_t> tok(c.tokens()), tgt(c.tokens());
  synthetic_batch(tok.data(), tgt.data(), DataKind::kRandom, 9, 0, 0, c.micro_batch, c.seq, c.vocab);
  m.forward(tok.data(), tgt.data());
  EXPECT_EQ(m.moe().routing(0).routed, (std::vector<int32_t>{4, 4, 4, 12}));
  m.moe().set_assignment([&](int, const int32_t*, int, int32_t* idx) { std::fill(idx, idx + c.tokens() * 2, 1); });
  EXPECT_THROW(m.forward(tok.data(), tgt.data()), std::invalid_argument);  // expert 1 twice
}

TEST(MoeConfig, RulesThrowUsageErrorNamingTheOption) {
  auto msg = [](GptConfig c) -> std::string {
    try {
      validate(c);
    } catch (const meshbench::core::UsageError& e) {
      return e.what();
    }
    return "";
  };
  GptConfig c = preset("small-moe");
  EXPECT_EQ(msg(c), "");
  c.top_k = 9;
  EXPECT_NE(msg(c).find("--top-k 9: must be between 1 and --experts 8 (top-k <= E)"), std::string::npos);
  c = preset("small-moe");
  c.experts = -1;
  EXPECT_NE(msg(c).find("--experts -1"), std::string::npos);
  c = preset("small-moe");
  c.capacity_factor = -0.5;
  EXPECT_NE(msg(c).find("--capacity-factor"), std::string::npos);
  c = preset("small-moe");
  c.moe_every = 0;
  EXPECT_NE(msg(c).find("--moe-every"), std::string::npos);
  c = preset("small-moe");
  c.aux_loss_coef = -1;
  EXPECT_NE(msg(c).find("--aux-loss-coef"), std::string::npos);
}

TEST(MoeModel, LayoutNamesAndMemoryMatchAnalytic) {
  for (double cf : {0.0, 1.0}) {
    GptConfig c = preset("small-moe");
    c.capacity_factor = cf;
    c.moe_every = 2;
    Gpt<float> m(c);
    EXPECT_EQ(m.layout().find("h.0.moe.expert.7.fc.weight").shape, (std::vector<int64_t>{1024, 256}));
    // Expert parallel rank 1 of 4: the router and experts 2, 3 by their global names.
    GptOptions o;
    o.ep = EpSpec{4, 1};
    Gpt<float> r(c, cpu_backend<float>(), o);
    EXPECT_NO_THROW(r.layout().find("h.0.moe.router.weight"));
    EXPECT_NO_THROW(r.layout().find("h.0.moe.expert.2.fc.weight"));
    EXPECT_NO_THROW(r.layout().find("h.0.moe.expert.3.proj.bias"));
    EXPECT_THROW(r.layout().find("h.0.moe.expert.1.fc.weight"), std::out_of_range);
    EXPECT_THROW(r.layout().find("h.0.moe.expert.4.fc.weight"), std::out_of_range);
    const auto ra = r.memory_allocated(), rf = Gpt<float>::memory_analytic(c, 4, {}, {}, o.ep);
    EXPECT_LE(rf.params, ra.params);
    EXPECT_LE(ra.params - rf.params, 16 * 4 * static_cast<int64_t>(r.layout().entries().size()));
    EXPECT_LE(rf.activations, ra.activations);
    EXPECT_LE(ra.activations - rf.activations, 16 * 4 * 80);
    EXPECT_EQ(ra.buffers, rf.buffers);
    const auto ranges = moe_expert_ranges(r.layout(), c);
    ASSERT_EQ(ranges.size(), size_t(c.moe_blocks()));
    EXPECT_EQ(ranges[0].first, r.layout().find("h.0.moe.expert.2.fc.weight").offset);
    const LayoutEntry& last = r.layout().find("h.0.moe.expert.3.proj.bias");
    EXPECT_EQ(ranges[0].second, last.offset + last.numel);
    EXPECT_EQ(m.layout().find("h.0.moe.router.weight").shape, (std::vector<int64_t>{8, 256}));
    EXPECT_THROW(m.layout().find("h.0.mlp.fc.weight"), std::out_of_range);
    EXPECT_NO_THROW(m.layout().find("h.1.mlp.fc.weight"));  // moe_every 2: block 1 is dense
    EXPECT_EQ(m.units().size(), size_t(c.layers + 2));      // each block one unit
    const auto a = m.memory_allocated(), f = Gpt<float>::memory_analytic(c, 4);
    const int64_t pad = 16 * 4 * static_cast<int64_t>(m.layout().entries().size());
    EXPECT_LE(f.params, a.params);
    EXPECT_LE(a.params - f.params, pad);
    EXPECT_EQ(a.optimizer, 2 * a.params);
    EXPECT_LE(f.activations, a.activations);
    EXPECT_LE(a.activations - f.activations, 16 * 4 * 80);
    EXPECT_EQ(a.buffers, f.buffers);
    int64_t n = 0;
    for (const auto& e : m.layout().entries()) n += e.numel;
    EXPECT_EQ(n * 4, f.params);
  }
}

// The bf16 emulation backend runs a MoE model: its loss and routing follow the CPU's.
TEST(MoeModel, Bf16EmulationRunsMoe) {
  GptConfig c = preset("tiny");
  c.experts = 4;
  c.top_k = 2;
  c.capacity_factor = 1.0;
  Gpt<float> cpu(c), emu(c, emulated_backend(Precision::kBf16));
  cpu.init_weights(4);
  emu.init_weights(4);
  std::vector<int32_t> tok(c.tokens()), tgt(c.tokens());
  synthetic_batch(tok.data(), tgt.data(), DataKind::kRandom, 4, 0, 0, c.micro_batch, c.seq, c.vocab);
  for (auto* m : {&cpu, &emu}) m->zero_grad();
  const float lc = cpu.forward(tok.data(), tgt.data()), le = emu.forward(tok.data(), tgt.data());
  cpu.backward();
  emu.backward();
  EXPECT_NEAR(le, lc, 1e-2 * lc);
  int64_t moved = 0;
  for (int l = 0; l < c.layers; ++l)
    for (int e = 0; e < c.experts; ++e)
      moved += std::abs(cpu.moe().routing(l).routed[e] - emu.moe().routing(l).routed[e]);
  EXPECT_LE(moved, c.tokens() * c.top_k / 20);  // bf16 router logits move a few near ties
  for (float g : emu.download_grads()) ASSERT_TRUE(std::isfinite(g));
}

// FLOPs: a MoE block counts its router and the k experts each token is routed to.
TEST(MoeModel, FlopsCountRouterAndRoutedExperts) {
  GptConfig c = preset("small-moe");  // L2 C256 F1024 T128 B8 V4096, E8 k2
  c.layers = 3;
  c.moe_every = 2;  // blocks 0 and 2 MoE, block 1 dense
  const double N = 8 * 128, C = 256, F = 1024, V = 4096, E = 8, k = 2;
  const double fwd = 2 * N * 4 * C * C * 3 + 2 * N * C * V + 2 * N * 2 * C * F * 1 +
                     2 * (2 * N * C * E + 2 * (N * k) * 2 * C * F);
  const StepFlops f = step_flops(c);
  EXPECT_DOUBLE_EQ(f.forward_gemm, fwd);
  EXPECT_DOUBLE_EQ(f.backward_gemm, 2 * fwd);
}
