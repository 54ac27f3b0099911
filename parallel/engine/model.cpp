// Gpt<S>: parameter layout, forward, backward and AdamW (llm.c's gpt2_* functions).
#include "model.hpp"

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
    case Op::kCount: break;
  }
  return "?";
}

template <typename S>
Gpt<S>::Gpt(const GptConfig& cfg, Backend<S>& be) : cfg_(cfg), be_(&be) {
  const int64_t L = cfg.layers, C = cfg.hidden, F = cfg.ffn, V = cfg.vocab,
                maxT = cfg.max_seq, QKV = cfg.qkv_width();
  wte_ = layout_.add("wte", {V, C}, true);
  wpe_ = layout_.add("wpe", {maxT, C}, true);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    LayerOffsets o{};
    o.ln1_w = layout_.add(p + "ln1.weight", {C}, false);
    o.ln1_b = layout_.add(p + "ln1.bias", {C}, false);
    o.qkv_w = layout_.add(p + "attn.qkv.weight", {QKV, C}, true, ShardRule::kReplicated);
    o.qkv_b = layout_.add(p + "attn.qkv.bias", {QKV}, false);
    o.proj_w = layout_.add(p + "attn.proj.weight", {C, C}, true);
    o.proj_b = layout_.add(p + "attn.proj.bias", {C}, false);
    o.ln2_w = layout_.add(p + "ln2.weight", {C}, false);
    o.ln2_b = layout_.add(p + "ln2.bias", {C}, false);
    o.fc_w = layout_.add(p + "mlp.fc.weight", {F, C}, true);
    o.fc_b = layout_.add(p + "mlp.fc.bias", {F}, false);
    o.fcproj_w = layout_.add(p + "mlp.proj.weight", {C, F}, true);
    o.fcproj_b = layout_.add(p + "mlp.proj.bias", {C}, false);
    lo_.push_back(o);
  }
  lnf_w_ = layout_.add("lnf.weight", {C}, false);
  lnf_b_ = layout_.add("lnf.bias", {C}, false);
  head_w_ = cfg.tied ? wte_ : layout_.add("lm_head.weight", {V, C}, true);
  head_b_ = layout_.add("lm_head.bias", {V}, false);
  // The backward finishes gradients in reverse layout order: head, final norm, blocks L-1..0,
  // and last the embeddings (whose wte is also the head when tied).
  auto end_of = [&](const std::string& name) {
    const LayoutEntry& e = layout_.find(name);
    return e.offset + e.numel;
  };
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    layer_range_.emplace_back(layout_.find(p + "ln1.weight").offset, end_of(p + "mlp.proj.bias"));
  }
  lnf_range_ = {lnf_w_, end_of("lnf.bias")};
  head_range_ = {cfg.tied ? head_b_ : head_w_, end_of("lm_head.bias")};
  embed_range_ = {0, end_of("wpe")};
  const int64_t P = layout_.total();
  params_ = BackendArray<S, S>(be, P);
  grads_ = BackendArray<S, S>(be, P);
  m_ = BackendArray<S, S>(be, P);
  v_ = BackendArray<S, S>(be, P);

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
    a.fch = act_layout_.add(p + "fch", {B, T, F}, false);
    a.fch_gelu = act_layout_.add(p + "fch_gelu", {B, T, F}, false);
    a.res3 = act_layout_.add(p + "res3", {B, T, C}, false);
    la_.push_back(a);
  }
  encoded_ = act_layout_.add("encoded", {B, T, C}, false);
  lnf_ = act_layout_.add("lnf", {B, T, C}, false);
  lnf_mean_ = act_layout_.add("lnf_mean", {B, T}, false);
  lnf_rstd_ = act_layout_.add("lnf_rstd", {B, T}, false);
  logits_ = act_layout_.add("logits", {B, T, V}, false);  // probs, then dlogits, in place
  losses_ = act_layout_.add("losses", {B, T}, false);
  acts_ = BackendArray<S, S>(be, act_layout_.total());

  dresid_ = BackendArray<S, S>(be, N * C);
  dln_ = BackendArray<S, S>(be, N * C);
  datty_ = BackendArray<S, S>(be, N * C);
  dqkv_ = BackendArray<S, S>(be, N * QKV);
  datt_ = BackendArray<S, S>(be, B * NH * T * T);
  dfch_ = BackendArray<S, S>(be, N * F);
  tokens_ = BackendArray<int32_t, S>(be, N);
  targets_ = BackendArray<int32_t, S>(be, N);
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
void Gpt<S>::init_weights(uint64_t seed) {
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
  upload_params(host.data());
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
const S* Gpt<S>::res_in(int l) const {
  return acts_.data() + (l == 0 ? encoded_ : la_[l - 1].res3);
}

template <typename S>
S Gpt<S>::forward(const int32_t* tokens, const int32_t* targets, S* logits_out) {
  const int B = cfg_.micro_batch, T = cfg_.seq, C = cfg_.hidden, F = cfg_.ffn, V = cfg_.vocab,
            NH = cfg_.heads, KVH = cfg_.kv_heads, hs = cfg_.head_size(), QKV = cfg_.qkv_width();
  const int N = B * T;
  const double attn_fwd_flops = 4.0 * static_cast<double>(attention_block_macs(T, hs)) * B * NH;
  trace_phase_ = 'F';
  Backend<S>& be = *be_;
  be.upload(tokens_.data(), tokens, sizeof(int32_t) * N);
  be.upload(targets_.data(), targets, sizeof(int32_t) * N);
  S* a = acts_.data();
  const S* p = params_.data();
  timed(Op::kEmbedding,
        [&] { be.embedding_forward(a + encoded_, tokens_.data(), p + wte_, p + wpe_, B, T, C); });
  for (int l = 0; l < cfg_.layers; ++l) {
    trace_layer_ = l;
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
    timed(Op::kMatmul,
          [&] { be.matmul_forward(a + x.fch, a + x.ln2, p + w.fc_w, p + w.fc_b, N, C, F, false); }, 2.0 * N * C * F);
    timed(Op::kGelu, [&] { be.gelu_forward(a + x.fch_gelu, a + x.fch, int64_t{N} * F); });
    timed(Op::kResidual, [&] { be.copy(a + x.res3, a + x.res2, int64_t{N} * C); });
    timed(Op::kMatmul, [&] {
      be.matmul_forward(a + x.res3, a + x.fch_gelu, p + w.fcproj_w, p + w.fcproj_b, N, F, C, true);
    }, 2.0 * N * F * C);
  }
  trace_layer_ = -1;  // embedding, final norm, head and loss are outside the blocks
  timed(Op::kLayerNorm, [&] {
    be.layernorm_forward(a + lnf_, a + lnf_mean_, a + lnf_rstd_, res_in(cfg_.layers), p + lnf_w_,
                      p + lnf_b_, N, C);
  });
  timed(Op::kMatmul,
        [&] { be.matmul_forward(a + logits_, a + lnf_, p + head_w_, p + head_b_, N, C, V, false); }, 2.0 * N * C * V);
  if (logits_out != nullptr) be.download(logits_out, a + logits_, sizeof(S) * N * V);
  S loss{};
  timed(Op::kLoss, [&] {
    loss = be.crossentropy_forward(a + logits_, a + losses_, a + logits_, targets_.data(), N, V);
  });
  return loss;
}

template <typename S>
void Gpt<S>::zero_grad() {
  be_->zero(grads_.data(), grads_.bytes());
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
  const S* p = params_.data();
  S* g = grads_.data();
  S* dresid = dresid_.data();
  S* dln = dln_.data();
  // d(loss_scale x mean loss)/dloss = loss_scale; probs become dlogits in place.
  timed(Op::kLoss, [&] {
    be.crossentropy_backward(a + logits_, a + logits_, targets_.data(), loss_scale, N, V);
  });
  timed(Op::kMatmul, [&] {
    be.matmul_backward(dln, g + head_w_, g + head_b_, a + logits_, a + lnf_, p + head_w_, N, C, V);
  }, 4.0 * N * C * V);
  grads_ready(head_range_.first, head_range_.second);
  be.zero(dresid, sizeof(S) * N * C);
  timed(Op::kLayerNorm, [&] {
    be.layernorm_backward(dresid, g + lnf_w_, g + lnf_b_, dln, res_in(cfg_.layers), p + lnf_w_,
                       a + lnf_mean_, a + lnf_rstd_, N, C);
  });
  grads_ready(lnf_range_.first, lnf_range_.second);
  // dresid now holds d(res3 of the last layer); each layer turns it into d(its input).
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    trace_layer_ = l;
    const LayerOffsets& w = lo_[l];
    const LayerActs& x = la_[l];
    S* dfch = dfch_.data();
    timed(Op::kMatmul, [&] {
      be.matmul_backward(dfch, g + w.fcproj_w, g + w.fcproj_b, dresid, a + x.fch_gelu,
                      p + w.fcproj_w, N, F, C);
    }, 4.0 * N * F * C);
    timed(Op::kGelu, [&] { be.gelu_backward(dfch, a + x.fch, dfch, int64_t{N} * F); });
    timed(Op::kMatmul, [&] {
      be.matmul_backward(dln, g + w.fc_w, g + w.fc_b, dfch, a + x.ln2, p + w.fc_w, N, C, F);
    }, 4.0 * N * C * F);
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
    grads_ready(layer_range_[l].first, layer_range_[l].second);
  }
  trace_layer_ = -1;
  timed(Op::kEmbedding,
        [&] { be.embedding_backward(g + wte_, g + wpe_, dresid, tokens_.data(), B, T, C); });
  grads_ready(embed_range_.first, embed_range_.second);
}

template <typename S>
void Gpt<S>::update(const AdamWConfig& cfg, int t) {
  trace_phase_ = 'O';
  trace_layer_ = -1;
  timed(Op::kAdamW, [&] {
    for (const auto& e : layout_.entries()) {
      be_->adamw_update(params_.data() + e.offset, grads_.data() + e.offset, m_.data() + e.offset,
                   v_.data() + e.offset, e.numel, cfg, e.weight_decay ? cfg.weight_decay : 0.0,
                   t);
    }
  });
}

template <typename S>
MemoryBytes Gpt<S>::memory_allocated() const {
  const int64_t s = sizeof(S);
  MemoryBytes m;
  m.params = params_.size() * s;
  m.grads = grads_.size() * s;
  m.optimizer = (m_.size() + v_.size()) * s;
  m.activations = acts_.size() * s;
  m.buffers = (dresid_.size() + dln_.size() + datty_.size() + dqkv_.size() + datt_.size() +
               dfch_.size()) * s + (tokens_.size() + targets_.size()) * 4;
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
