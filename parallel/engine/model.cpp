// Gpt<S>: parameter layout, forward, backward and AdamW (llm.c's gpt2_* functions).
#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include <fmt/core.h>

#include "core/timer.hpp"

namespace meshbench::parallel {

const char* op_name(Op op) {
  switch (op) {
    case Op::kEmbedding: return "embedding";
    case Op::kLayerNorm: return "layernorm";
    case Op::kMatmul: return "matmul";
    case Op::kAttention: return "attention";
    case Op::kGelu: return "gelu";
    case Op::kResidual: return "residual";
    case Op::kLoss: return "crossentropy";
    case Op::kAdamW: return "adamw";
    case Op::kRouter: return "router";
    case Op::kPermute: return "permute";
    case Op::kCount: break;
  }
  return "?";
}

template <typename S>
Gpt<S>::Gpt(const GptConfig& cfg, Backend<S>& be, GptOptions opts) : cfg_(cfg), be_(&be), opts_(opts), moe_(cfg) {
  const int64_t L = cfg.layers, C = cfg.hidden, F = cfg.ffn, V = cfg.vocab,
                maxT = cfg.max_seq, QKV = cfg.qkv_width();
  const int64_t mult = std::max<int64_t>(1, opts.unit_multiple);
  // Units in layout order; offsets inside a unit are kept relative to the unit's start.
  auto close_unit = [&](std::string name, int64_t lo) {
    layout_.pad_unit(lo, mult);
    units_.push_back({std::move(name), lo, layout_.total()});
  };
  wte_ = layout_.add("wte", {V, C}, true);
  wpe_ = layout_.add("wpe", {maxT, C}, true);
  close_unit("embed", 0);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    const int64_t u = (layout_.total() + 15) / 16 * 16;
    LayerOffsets o{};
    o.ln1_w = layout_.add(p + "ln1.weight", {C}, false) - u;
    o.ln1_b = layout_.add(p + "ln1.bias", {C}, false) - u;
    o.qkv_w = layout_.add(p + "attn.qkv.weight", {QKV, C}, true, ShardRule::kReplicated) - u;
    o.qkv_b = layout_.add(p + "attn.qkv.bias", {QKV}, false) - u;
    o.proj_w = layout_.add(p + "attn.proj.weight", {C, C}, true) - u;
    o.proj_b = layout_.add(p + "attn.proj.bias", {C}, false) - u;
    o.ln2_w = layout_.add(p + "ln2.weight", {C}, false) - u;
    o.ln2_b = layout_.add(p + "ln2.bias", {C}, false) - u;
    if (cfg.is_moe(static_cast<int>(l))) {
      moe_.add_params(static_cast<int>(l), layout_, p, u);
    } else {
      o.fc_w = layout_.add(p + "mlp.fc.weight", {F, C}, true) - u;
      o.fc_b = layout_.add(p + "mlp.fc.bias", {F}, false) - u;
      o.fcproj_w = layout_.add(p + "mlp.proj.weight", {C, F}, true) - u;
      o.fcproj_b = layout_.add(p + "mlp.proj.bias", {C}, false) - u;
    }
    lo_.push_back(o);
    close_unit(fmt::format("h.{}", l), u);
  }
  const int64_t hu = (layout_.total() + 15) / 16 * 16;
  lnf_w_ = layout_.add("lnf.weight", {C}, false) - hu;
  lnf_b_ = layout_.add("lnf.bias", {C}, false) - hu;
  head_w_ = cfg.tied ? wte_ : layout_.add("lm_head.weight", {V, C}, true) - hu;
  head_b_ = layout_.add("lm_head.bias", {V}, false) - hu;
  close_unit("head", hu);
  const int64_t P = layout_.total();
  if (opts.own_params) params_ = BackendArray<S, S>(be, P, &mem_, MemCat::kParams);
  if (opts.own_grads) grads_ = BackendArray<S, S>(be, P, &mem_, MemCat::kGrads);
  if (opts.own_optimizer) set_optimizer_shard(P);

  const int64_t B = cfg.micro_batch, T = cfg.seq, N = B * T, NH = cfg.heads;
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    LayerActs a{};
    a.ln1 = act_layout_.add(p + "ln1", {B, T, C}, false);
    a.ln1_mean = act_layout_.add(p + "ln1_mean", {B, T}, false);
    a.ln1_rstd = act_layout_.add(p + "ln1_rstd", {B, T}, false);
    a.qkv = act_layout_.add(p + "qkv", {B, T, QKV}, false);
    a.att = act_layout_.add(p + "att", {B, NH, T, T}, false);
    a.atty = act_layout_.add(p + "atty", {B, T, C}, false);
    a.res2 = act_layout_.add(p + "res2", {B, T, C}, false);
    a.ln2 = act_layout_.add(p + "ln2", {B, T, C}, false);
    a.ln2_mean = act_layout_.add(p + "ln2_mean", {B, T}, false);
    a.ln2_rstd = act_layout_.add(p + "ln2_rstd", {B, T}, false);
    if (cfg.is_moe(static_cast<int>(l))) {
      moe_.add_acts(static_cast<int>(l), act_layout_, p);
    } else {
      a.fch = act_layout_.add(p + "fch", {B, T, F}, false);
      a.fch_gelu = act_layout_.add(p + "fch_gelu", {B, T, F}, false);
    }
    a.res3 = act_layout_.add(p + "res3", {B, T, C}, false);
    la_.push_back(a);
  }
  encoded_ = act_layout_.add("encoded", {B, T, C}, false);
  lnf_ = act_layout_.add("lnf", {B, T, C}, false);
  lnf_mean_ = act_layout_.add("lnf_mean", {B, T}, false);
  lnf_rstd_ = act_layout_.add("lnf_rstd", {B, T}, false);
  logits_ = act_layout_.add("logits", {B, T, V}, false);  // probs, then dlogits, in place
  losses_ = act_layout_.add("losses", {B, T}, false);
  acts_ = BackendArray<S, S>(be, act_layout_.total(), &mem_, MemCat::kActivations);

  const MemCat kBuf = MemCat::kBuffers;
  dresid_ = BackendArray<S, S>(be, N * C, &mem_, kBuf);
  dln_ = BackendArray<S, S>(be, N * C, &mem_, kBuf);
  datty_ = BackendArray<S, S>(be, N * C, &mem_, kBuf);
  dqkv_ = BackendArray<S, S>(be, N * QKV, &mem_, kBuf);
  datt_ = BackendArray<S, S>(be, B * NH * T * T, &mem_, kBuf);
  dfch_ = BackendArray<S, S>(be, N * F, &mem_, kBuf);
  tokens_ = BackendArray<int32_t, S>(be, N, &mem_, kBuf);
  targets_ = BackendArray<int32_t, S>(be, N, &mem_, kBuf);
  moe_.allocate(be, &mem_);
}

template <typename S>
std::vector<S> Gpt<S>::download_params() const {
  std::vector<S> h(static_cast<size_t>(layout_.total()));
  be_->download(h.data(), params_.data(), params_.bytes());
  return h;
}

template <typename S>
std::vector<S> Gpt<S>::download_grads() const {
  std::vector<S> h(static_cast<size_t>(layout_.total()));
  be_->download(h.data(), grads_.data(), grads_.bytes());
  return h;
}

template <typename S>
void Gpt<S>::upload_params(const S* host) {
  be_->upload(params_.data(), host, params_.bytes());
}

template <typename S>
int64_t Gpt<S>::num_params() const {
  int64_t n = 0;
  for (const auto& e : layout_.entries()) n += e.numel;
  return n;
}

template <typename S>
std::vector<S> Gpt<S>::canonical_weights(uint64_t seed) const {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<S> host(static_cast<size_t>(layout_.total()), S(0));
  const double proj_std = 0.02 / std::sqrt(2.0 * cfg_.layers);
  for (const auto& e : layout_.entries()) {
    S* p = host.data() + e.offset;
    const bool is_norm_weight = e.name.find("ln") != std::string::npos &&
                                e.name.find(".weight") != std::string::npos;
    if (is_norm_weight) {
      for (int64_t i = 0; i < e.numel; ++i) p[i] = S(1);
    } else if (e.shape.size() == 2) {
      const bool residual_proj = e.name.find(".proj.weight") != std::string::npos;
      const double sd = residual_proj ? proj_std : 0.02;
      for (int64_t i = 0; i < e.numel; ++i) p[i] = static_cast<S>(sd * normal(rng));
    }  // biases stay 0
  }
  return host;
}

template <typename S>
void Gpt<S>::init_weights(uint64_t seed) {
  if (opts_.own_params) upload_params(canonical_weights(seed).data());
  be_->zero(m_.data(), m_.bytes());
  be_->zero(v_.data(), v_.bytes());
}

template <typename S>
template <typename F>
void Gpt<S>::timed(Op op, F&& f, double flops) {
  if (!profiling_ && trace_ == nullptr) {
    f();
  } else {
    // A device backend queues ops: profiling waits for each so its time is its own.
    const bool sync = profiling_ && be_->mem() == compute::MemKind::kDevice;
    if (sync) be_->synchronize();
    const double t0 = core::now_seconds();
    f();
    if (sync) be_->synchronize();
    const double t1 = core::now_seconds();
    if (profiling_) op_s_[static_cast<int>(op)] += t1 - t0;
    if (trace_ != nullptr)
      trace_->push_back({trace_step_, trace_micro_, trace_layer_, op, trace_phase_, flops, t0, t1});
  }
  if (hooks_.poll) hooks_.poll();
}

template <typename S>
typename MoeMlp<S>::Timed Gpt<S>::moe_timed() {
  return [this](Op op, const std::function<void()>& f, double flops) { timed(op, f, flops); };
}

template <typename S>
const S* Gpt<S>::res_in(int l) const {
  return acts_.data() + (l == 0 ? encoded_ : la_[l - 1].res3);
}

template <typename S>
S Gpt<S>::forward(const int32_t* tokens, const int32_t* targets, S* logits_out) {
  const int B = cfg_.micro_batch, T = cfg_.seq, C = cfg_.hidden, F = cfg_.ffn, V = cfg_.vocab,
            NH = cfg_.heads, KVH = cfg_.kv_heads, hs = cfg_.head_size(), QKV = cfg_.qkv_width();
  const int N = B * T;
  const double attn_fwd_flops = 4.0 * static_cast<double>(attention_block_macs(T, hs)) * B * NH;
  double aux = 0;  // the MoE blocks' load-balancing losses
  trace_phase_ = 'F';
  trace_layer_ = -1;
  Backend<S>& be = *be_;
  be.upload(tokens_.data(), tokens, sizeof(int32_t) * N);
  be.upload(targets_.data(), targets, sizeof(int32_t) * N);
  S* a = acts_.data();
  acquire(0, 'F');
  const S* pe = P(0);
  timed(Op::kEmbedding,
        [&] { be.embedding_forward(a + encoded_, tokens_.data(), pe + wte_, pe + wpe_, B, T, C); });
  if (!cfg_.tied) release(0, 'F');  // a tied head reads wte again at the end
  for (int l = 0; l < cfg_.layers; ++l) {
    trace_layer_ = l;
    acquire(l + 1, 'F');
    const S* p = P(l + 1);
    const LayerOffsets& w = lo_[l];
    const LayerActs& x = la_[l];
    const S* res = res_in(l);
    timed(Op::kLayerNorm, [&] {
      be.layernorm_forward(a + x.ln1, a + x.ln1_mean, a + x.ln1_rstd, res, p + w.ln1_w,
                           p + w.ln1_b, N, C);
    });
    timed(Op::kMatmul,
          [&] { be.matmul_forward(a + x.qkv, a + x.ln1, p + w.qkv_w, p + w.qkv_b, N, C, QKV, false); }, 2.0 * N * C * QKV);
    timed(Op::kAttention,
          [&] { be.attention_forward(a + x.atty, a + x.att, a + x.qkv, B, T, NH, KVH, hs); }, attn_fwd_flops);
    // Residual fused into the projection: res2 = res, then res2 += atty @ Wp^T + bp.
    timed(Op::kResidual, [&] { be.copy(a + x.res2, res, int64_t{N} * C); });
    timed(Op::kMatmul, [&] {
      be.matmul_forward(a + x.res2, a + x.atty, p + w.proj_w, p + w.proj_b, N, C, C, true);
    }, 2.0 * N * C * C);
    timed(Op::kLayerNorm, [&] {
      be.layernorm_forward(a + x.ln2, a + x.ln2_mean, a + x.ln2_rstd, a + x.res2, p + w.ln2_w,
                           p + w.ln2_b, N, C);
    });
    timed(Op::kResidual, [&] { be.copy(a + x.res3, a + x.res2, int64_t{N} * C); });
    if (cfg_.is_moe(l)) {  // res3 += MoE(ln2) (moe.hpp)
      aux += moe_.forward(l, p, a, a + x.ln2, a + x.res3, moe_timed());
    } else {
      timed(Op::kMatmul,
            [&] { be.matmul_forward(a + x.fch, a + x.ln2, p + w.fc_w, p + w.fc_b, N, C, F, false); }, 2.0 * N * C * F);
      timed(Op::kGelu, [&] { be.gelu_forward(a + x.fch_gelu, a + x.fch, int64_t{N} * F); });
      timed(Op::kMatmul, [&] {
        be.matmul_forward(a + x.res3, a + x.fch_gelu, p + w.fcproj_w, p + w.fcproj_b, N, F, C, true);
      }, 2.0 * N * F * C);
    }
    release(l + 1, 'F');
  }
  trace_layer_ = -1;  // embedding, final norm, head and loss are outside the blocks
  const int hu = head_unit();
  acquire(hu, 'F');
  const S* ph = P(hu);
  const S* head_w = cfg_.tied ? P(0) + head_w_ : ph + head_w_;
  timed(Op::kLayerNorm, [&] {
    be.layernorm_forward(a + lnf_, a + lnf_mean_, a + lnf_rstd_, res_in(cfg_.layers), ph + lnf_w_,
                         ph + lnf_b_, N, C);
  });
  timed(Op::kMatmul,
        [&] { be.matmul_forward(a + logits_, a + lnf_, head_w, ph + head_b_, N, C, V, false); }, 2.0 * N * C * V);
  release(hu, 'F');
  if (cfg_.tied) release(0, 'F');
  if (logits_out != nullptr) be.download(logits_out, a + logits_, sizeof(S) * N * V);
  S loss{};
  timed(Op::kLoss, [&] {
    loss = be.crossentropy_forward(a + logits_, a + losses_, a + logits_, targets_.data(), N, V);
  });
  return loss + static_cast<S>(aux);
}

template <typename S>
void Gpt<S>::zero_grad() {
  if (opts_.own_grads) be_->zero(grads_.data(), grads_.bytes());
}

template <typename S>
void Gpt<S>::backward(S loss_scale) {
  const int B = cfg_.micro_batch, T = cfg_.seq, C = cfg_.hidden, F = cfg_.ffn, V = cfg_.vocab,
            NH = cfg_.heads, KVH = cfg_.kv_heads, hs = cfg_.head_size(), QKV = cfg_.qkv_width();
  const int N = B * T;
  const double attn_fwd_flops = 4.0 * static_cast<double>(attention_block_macs(T, hs)) * B * NH;
  trace_phase_ = 'B';
  trace_layer_ = -1;
  Backend<S>& be = *be_;
  S* a = acts_.data();
  S* dresid = dresid_.data();
  S* dln = dln_.data();
  const int hu = head_unit();
  // d(loss_scale x mean loss)/dloss = loss_scale; probs become dlogits in place.
  timed(Op::kLoss, [&] {
    be.crossentropy_backward(a + logits_, a + logits_, targets_.data(), loss_scale, N, V);
  });
  acquire(hu, 'B');
  if (cfg_.tied) acquire(0, 'B');  // the head's weight is wte: its gradient accumulates there
  const S* ph = P(hu);
  S* gh = G(hu);
  const S* head_w = cfg_.tied ? P(0) + head_w_ : ph + head_w_;
  S* dhead_w = cfg_.tied ? G(0) + head_w_ : gh + head_w_;
  timed(Op::kMatmul, [&] {
    be.matmul_backward(dln, dhead_w, gh + head_b_, a + logits_, a + lnf_, head_w, N, C, V);
  }, 4.0 * N * C * V);
  be.zero(dresid, sizeof(S) * N * C);
  timed(Op::kLayerNorm, [&] {
    be.layernorm_backward(dresid, gh + lnf_w_, gh + lnf_b_, dln, res_in(cfg_.layers), ph + lnf_w_,
                          a + lnf_mean_, a + lnf_rstd_, N, C);
  });
  release(hu, 'B');
  grads_ready(units_[hu].lo, units_[hu].hi);
  // dresid now holds d(res3 of the last layer); each layer turns it into d(its input).
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    trace_layer_ = l;
    acquire(l + 1, 'B');
    const S* p = P(l + 1);
    S* g = G(l + 1);
    const LayerOffsets& w = lo_[l];
    const LayerActs& x = la_[l];
    S* dfch = dfch_.data();
    if (cfg_.is_moe(l)) {  // dln = d(ln2) through the MoE MLP (moe.hpp)
      moe_.backward(l, p, g, a, a + x.ln2, dresid, dln, loss_scale, moe_timed());
    } else {
      timed(Op::kMatmul, [&] {
        be.matmul_backward(dfch, g + w.fcproj_w, g + w.fcproj_b, dresid, a + x.fch_gelu,
                           p + w.fcproj_w, N, F, C);
      }, 4.0 * N * F * C);
      timed(Op::kGelu, [&] { be.gelu_backward(dfch, a + x.fch, dfch, int64_t{N} * F); });
      timed(Op::kMatmul, [&] {
        be.matmul_backward(dln, g + w.fc_w, g + w.fc_b, dfch, a + x.ln2, p + w.fc_w, N, C, F);
      }, 4.0 * N * C * F);
    }
    timed(Op::kLayerNorm, [&] {  // dresid += : becomes d(res2)
      be.layernorm_backward(dresid, g + w.ln2_w, g + w.ln2_b, dln, a + x.res2, p + w.ln2_w,
                            a + x.ln2_mean, a + x.ln2_rstd, N, C);
    });
    timed(Op::kMatmul, [&] {
      be.matmul_backward(datty_.data(), g + w.proj_w, g + w.proj_b, dresid, a + x.atty,
                         p + w.proj_w, N, C, C);
    }, 4.0 * N * C * C);
    timed(Op::kAttention, [&] {
      be.attention_backward(dqkv_.data(), datt_.data(), datty_.data(), a + x.qkv, a + x.att, B, T,
                            NH, KVH, hs);
    }, 2 * attn_fwd_flops);
    timed(Op::kMatmul, [&] {
      be.matmul_backward(dln, g + w.qkv_w, g + w.qkv_b, dqkv_.data(), a + x.ln1, p + w.qkv_w, N, C,
                         QKV);
    }, 4.0 * N * C * QKV);
    timed(Op::kLayerNorm, [&] {  // dresid += : becomes d(res of layer l's input)
      be.layernorm_backward(dresid, g + w.ln1_w, g + w.ln1_b, dln, res_in(l), p + w.ln1_w,
                            a + x.ln1_mean, a + x.ln1_rstd, N, C);
    });
    release(l + 1, 'B');
    grads_ready(units_[l + 1].lo, units_[l + 1].hi);
  }
  trace_layer_ = -1;
  if (!cfg_.tied) acquire(0, 'B');
  S* ge = G(0);
  timed(Op::kEmbedding,
        [&] { be.embedding_backward(ge + wte_, ge + wpe_, dresid, tokens_.data(), B, T, C); });
  release(0, 'B');
  grads_ready(units_[0].lo, units_[0].hi);
}

template <typename S>
void Gpt<S>::set_optimizer_shard(int64_t elements) {
  m_ = BackendArray<S, S>(*be_, elements, &mem_, MemCat::kOptimizer);
  v_ = BackendArray<S, S>(*be_, elements, &mem_, MemCat::kOptimizer);
}

template <typename S>
void Gpt<S>::update(const AdamWConfig& cfg, int t) {
  update_pieces({{0, layout_.total(), params_.data(), grads_.data(), 0}}, cfg, t);
}

template <typename S>
void Gpt<S>::update_pieces(const std::vector<OptPiece>& pieces, const AdamWConfig& cfg, int t) {
  trace_phase_ = 'O';
  trace_layer_ = -1;
  timed(Op::kAdamW, [&] {
    for (const OptPiece& pc : pieces) {
      for (const auto& e : layout_.entries()) {  // weight decay is per tensor
        const int64_t a = std::max(pc.lo, e.offset), b = std::min(pc.hi, e.offset + e.numel);
        if (a >= b) continue;
        const int64_t k = a - pc.lo;
        be_->adamw_update(pc.params + k, pc.grads + k, m_.data() + pc.moment_off + k,
                          v_.data() + pc.moment_off + k, b - a, cfg, e.weight_decay ? cfg.weight_decay : 0.0, t);
      }
    }
  });
}

template <typename S>
MemoryBytes Gpt<S>::memory_allocated() const {
  MemoryBytes m;
  m.params = mem_.now[static_cast<int>(MemCat::kParams)];
  m.grads = mem_.now[static_cast<int>(MemCat::kGrads)];
  m.optimizer = mem_.now[static_cast<int>(MemCat::kOptimizer)];
  m.activations = mem_.now[static_cast<int>(MemCat::kActivations)];
  m.buffers = mem_.now[static_cast<int>(MemCat::kBuffers)];
  return m;
}

template <typename S>
MemoryBytes Gpt<S>::memory_analytic(const GptConfig& c, int64_t sb) {
  // Closed forms, written independently of the layout tables (padding not counted).
  const int64_t L = c.layers, C = c.hidden, F = c.ffn, V = c.vocab, maxT = c.max_seq,
                QKV = c.qkv_width(), B = c.micro_batch, T = c.seq, N = B * T, NH = c.heads;
  const int64_t per_layer = 4 * C + QKV * C + QKV + C * C + C + F * C + F + C * F + C;
  const int64_t P = V * C + maxT * C + L * per_layer + 2 * C + (c.tied ? 0 : V * C) + V;
  MemoryBytes m;
  m.params = P * sb;
  m.grads = P * sb;
  m.optimizer = 2 * P * sb;
  // per layer: ln1, atty, res2, ln2, res3 (N*C each), qkv, 2 x fch, att, 4 norm statistics
  const int64_t act_layer = 5 * N * C + N * QKV + 2 * N * F + B * NH * T * T + 4 * N;
  m.activations = (L * act_layer + 2 * N * C + 2 * N + N * V + N) * sb;
  m.buffers = (3 * N * C + N * QKV + B * NH * T * T + N * F) * sb + 2 * N * 4;
  const MoeMemory moe = moe_memory(c, sb);  // the MoE blocks against the dense MLPs
  m.params += moe.param_elements * sb;
  m.grads += moe.param_elements * sb;
  m.optimizer += 2 * moe.param_elements * sb;
  m.activations += moe.activation_bytes;
  m.buffers += moe.buffer_bytes;
  return m;
}

template class Gpt<float>;
template class Gpt<double>;

namespace {
// splitmix64: a counter-based generator, so (seed, step, sample, position) -> id is a pure
// function and any rank can produce any sample.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

void synthetic_batch(int32_t* tokens, int32_t* targets, DataKind kind, uint64_t seed,
                     int64_t step, int64_t first_sample, int B, int T, int V) {
  for (int b = 0; b < B; ++b) {
    const uint64_t sample = static_cast<uint64_t>(first_sample + b);
    for (int t = 0; t <= T; ++t) {
      uint64_t h;
      if (kind == DataKind::kRandom) {
        h = mix(mix(mix(seed) ^ static_cast<uint64_t>(step)) ^ sample) ^ static_cast<uint64_t>(t);
        h = mix(h);
      } else {
        h = mix(mix(seed) ^ static_cast<uint64_t>(t % 8));
      }
      const int32_t id = static_cast<int32_t>(h % static_cast<uint64_t>(V));
      if (t < T) tokens[b * T + t] = id;
      if (t > 0) targets[b * T + t - 1] = id;
    }
  }
}

}  // namespace meshbench::parallel
