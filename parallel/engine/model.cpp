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
    case Op::kCount: break;
  }
  return "?";
}

template <typename S>
Gpt<S>::Gpt(const GptConfig& cfg, Backend<S>& be, GptOptions opts) : cfg_(cfg), be_(&be), opts_(opts) {
  const int64_t L = cfg.layers, C = cfg.hidden, F = cfg.ffn, V = cfg.vocab,
                maxT = cfg.max_seq, QKV = cfg.qkv_width();
  const int64_t mult = std::max<int64_t>(1, opts.unit_multiple);
  // Units in layout order; offsets inside a unit are kept relative to the unit's start.
  auto close_unit = [&](std::string name, int64_t lo) {
    layout_.pad_unit(lo, mult);
    units_.push_back({std::move(name), lo, layout_.total()});
  };
  // The stage: which blocks, and whether the embeddings and the head live here.
  const StageSpec whole{{{0, cfg.layers}}, true, true, 1};
  const StageSpec& st = opts.stage ? *opts.stage : whole;
  chunks_ = st.chunks;
  token_slots_ = std::max(1, st.micro_batches);
  bu_.assign(static_cast<size_t>(L), -1);
  chunk_start_.assign(static_cast<size_t>(L) + 1, 0);
  lo_.resize(static_cast<size_t>(L));
  tied_embed_ = cfg.tied && st.first;
  if (st.first) {
    wte_ = layout_.add("wte", {V, C}, true);
    wpe_ = layout_.add("wpe", {maxT, C}, true);
    embed_unit_ = 0;
    close_unit("embed", 0);
  }
  for (const auto& [lb, le] : chunks_) chunk_start_[static_cast<size_t>(lb)] = 1;
  for (const auto& [lb, le] : chunks_)
  for (int64_t l = lb; l < le; ++l) {
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
    o.fc_w = layout_.add(p + "mlp.fc.weight", {F, C}, true) - u;
    o.fc_b = layout_.add(p + "mlp.fc.bias", {F}, false) - u;
    o.fcproj_w = layout_.add(p + "mlp.proj.weight", {C, F}, true) - u;
    o.fcproj_b = layout_.add(p + "mlp.proj.bias", {C}, false) - u;
    lo_[static_cast<size_t>(l)] = o;
    bu_[static_cast<size_t>(l)] = static_cast<int>(units_.size());
    close_unit(fmt::format("h.{}", l), u);
  }
  if (st.last) {
    const int64_t hu = (layout_.total() + 15) / 16 * 16;
    lnf_w_ = layout_.add("lnf.weight", {C}, false) - hu;
    lnf_b_ = layout_.add("lnf.bias", {C}, false) - hu;
    // A tied head reads the embedding unit's wte, or on a stage without it its own copy.
    head_w_ = tied_embed_ ? wte_ : layout_.add(cfg.tied ? "wte" : "lm_head.weight", {V, C}, true) - hu;
    head_b_ = layout_.add("lm_head.bias", {V}, false) - hu;
    head_unit_ = static_cast<int>(units_.size());
    close_unit("head", hu);
  }
  const int64_t P = layout_.total();
  if (opts.own_params) params_ = BackendArray<S, S>(be, P, &mem_, MemCat::kParams);
  if (opts.own_grads) grads_ = BackendArray<S, S>(be, P, &mem_, MemCat::kGrads);
  if (opts.own_optimizer) set_optimizer_shard(P);

  const int64_t B = cfg.micro_batch, T = cfg.seq, N = B * T, NH = cfg.heads;
  la_.resize(static_cast<size_t>(L));
  for (size_t c = 0; c < chunks_.size(); ++c) {
  Layout& al = act_layouts_.emplace_back();
  encoded_ = al.add(st.first && c == 0 ? "encoded" : "input", {B, T, C}, false);  // offset 0
  for (int64_t l = chunks_[c].first; l < chunks_[c].second; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    LayerActs a{};
    a.ln1 = al.add(p + "ln1", {B, T, C}, false);
    a.ln1_mean = al.add(p + "ln1_mean", {B, T}, false);
    a.ln1_rstd = al.add(p + "ln1_rstd", {B, T}, false);
    a.qkv = al.add(p + "qkv", {B, T, QKV}, false);
    a.att = al.add(p + "att", {B, NH, T, T}, false);
    a.atty = al.add(p + "atty", {B, T, C}, false);
    a.res2 = al.add(p + "res2", {B, T, C}, false);
    a.ln2 = al.add(p + "ln2", {B, T, C}, false);
    a.ln2_mean = al.add(p + "ln2_mean", {B, T}, false);
    a.ln2_rstd = al.add(p + "ln2_rstd", {B, T}, false);
    a.fch = al.add(p + "fch", {B, T, F}, false);
    a.fch_gelu = al.add(p + "fch_gelu", {B, T, F}, false);
    a.res3 = al.add(p + "res3", {B, T, C}, false);
    la_[static_cast<size_t>(l)] = a;
  }
  if (st.last && c + 1 == chunks_.size()) {
    lnf_ = al.add("lnf", {B, T, C}, false);
    lnf_mean_ = al.add("lnf_mean", {B, T}, false);
    lnf_rstd_ = al.add("lnf_rstd", {B, T}, false);
    logits_ = al.add("logits", {B, T, V}, false);  // probs, then dlogits, in place
    losses_ = al.add("losses", {B, T}, false);
  }
  }
  if (!opts.stage) take_slot(0, 0);  // the whole model: one slot for the model's life

  const MemCat kBuf = MemCat::kBuffers;
  dresid_ = BackendArray<S, S>(be, N * C, &mem_, kBuf);
  dln_ = BackendArray<S, S>(be, N * C, &mem_, kBuf);
  datty_ = BackendArray<S, S>(be, N * C, &mem_, kBuf);
  dqkv_ = BackendArray<S, S>(be, N * QKV, &mem_, kBuf);
  datt_ = BackendArray<S, S>(be, B * NH * T * T, &mem_, kBuf);
  dfch_ = BackendArray<S, S>(be, N * F, &mem_, kBuf);
  tokens_ = BackendArray<int32_t, S>(be, N * token_slots_, &mem_, kBuf);
  targets_ = BackendArray<int32_t, S>(be, N * token_slots_, &mem_, kBuf);
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
const S* Gpt<S>::res_in(int l) const {
  return a_ + (chunk_start_[static_cast<size_t>(l)] ? encoded_ : la_[static_cast<size_t>(l) - 1].res3);
}

template <typename S>
S* Gpt<S>::take_slot(int chunk, int micro) {
  auto it = slots_.find({chunk, micro});
  if (it == slots_.end())
    it = slots_.emplace(std::make_pair(chunk, micro),
                        BackendArray<S, S>(*be_, slot_elements(chunk), &mem_, MemCat::kActivations)).first;
  return it->second.data();
}

template <typename S>
S* Gpt<S>::stage_input(int chunk, int micro) {
  return take_slot(chunk, micro) + encoded_;
}

template <typename S>
const S* Gpt<S>::stage_output(int chunk, int micro) const {
  return slots_.at({chunk, micro}).data() + la_[static_cast<size_t>(chunks_[static_cast<size_t>(chunk)].second) - 1].res3;
}

template <typename S>
S Gpt<S>::forward(const int32_t* tokens, const int32_t* targets, S* logits_out) {
  return forward_chunk(0, 0, tokens, targets, logits_out);
}

template <typename S>
void Gpt<S>::backward(S loss_scale) {
  backward_chunk(0, 0, loss_scale, nullptr, nullptr);
}

template <typename S>
S Gpt<S>::forward_chunk(int chunk, int micro, const int32_t* tokens, const int32_t* targets, S* logits_out) {
  const int B = cfg_.micro_batch, T = cfg_.seq, C = cfg_.hidden, F = cfg_.ffn, V = cfg_.vocab,
            NH = cfg_.heads, KVH = cfg_.kv_heads, hs = cfg_.head_size(), QKV = cfg_.qkv_width();
  const int N = B * T;
  const double attn_fwd_flops = 4.0 * static_cast<double>(attention_block_macs(T, hs)) * B * NH;
  trace_phase_ = 'F';
  trace_layer_ = -1;
  Backend<S>& be = *be_;
  // Stage entry: the slot of (chunk, micro); the first stage's chunk 0 embeds the tokens,
  // any other chunk finds its received input at offset 0.
  S* a = a_ = take_slot(chunk, micro);
  int32_t* tok = tokens_.data() + int64_t{N} * (micro % token_slots_);
  int32_t* tgt = targets_.data() + int64_t{N} * (micro % token_slots_);
  const bool embeds = embed_unit_ >= 0 && chunk == 0, heads = head_unit_ >= 0 && chunk + 1 == num_chunks();
  if (heads) be.upload(tgt, targets, sizeof(int32_t) * N);
  if (embeds) {
  be.upload(tok, tokens, sizeof(int32_t) * N);
  acquire(embed_unit_, 'F');
  const S* pe = P(embed_unit_);
  timed(Op::kEmbedding,
        [&] { be.embedding_forward(a + encoded_, tok, pe + wte_, pe + wpe_, B, T, C); });
  if (!tied_embed_ || !heads) release(embed_unit_, 'F');  // a tied head reads wte again at the end
  }
  for (int l = chunks_[static_cast<size_t>(chunk)].first; l < chunks_[static_cast<size_t>(chunk)].second; ++l) {
    trace_layer_ = l;
    acquire(bu_[static_cast<size_t>(l)], 'F');
    const S* p = P(bu_[static_cast<size_t>(l)]);
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
    release(bu_[static_cast<size_t>(l)], 'F');
  }
  trace_layer_ = -1;  // embedding, final norm, head and loss are outside the blocks
  if (!heads) return S(0);  // stage exit: the output stays in the slot (stage_output)
  const int hu = head_unit();
  acquire(hu, 'F');
  const S* ph = P(hu);
  const S* head_w = tied_embed_ ? P(embed_unit_) + head_w_ : ph + head_w_;
  timed(Op::kLayerNorm, [&] {
    be.layernorm_forward(a + lnf_, a + lnf_mean_, a + lnf_rstd_, res_in(cfg_.layers), ph + lnf_w_,
                         ph + lnf_b_, N, C);
  });
  timed(Op::kMatmul,
        [&] { be.matmul_forward(a + logits_, a + lnf_, head_w, ph + head_b_, N, C, V, false); }, 2.0 * N * C * V);
  release(hu, 'F');
  if (tied_embed_) release(embed_unit_, 'F');
  if (logits_out != nullptr) be.download(logits_out, a + logits_, sizeof(S) * N * V);
  S loss{};
  timed(Op::kLoss, [&] {
    loss = be.crossentropy_forward(a + logits_, a + losses_, a + logits_, tgt, N, V);
  });
  return loss;
}

template <typename S>
void Gpt<S>::zero_grad() {
  if (opts_.own_grads) be_->zero(grads_.data(), grads_.bytes());
}

template <typename S>
void Gpt<S>::backward_chunk(int chunk, int micro, S loss_scale, const S* dout, S* din) {
  const int B = cfg_.micro_batch, T = cfg_.seq, C = cfg_.hidden, F = cfg_.ffn, V = cfg_.vocab,
            NH = cfg_.heads, KVH = cfg_.kv_heads, hs = cfg_.head_size(), QKV = cfg_.qkv_width();
  const int N = B * T;
  const double attn_fwd_flops = 4.0 * static_cast<double>(attention_block_macs(T, hs)) * B * NH;
  trace_phase_ = 'B';
  trace_layer_ = -1;
  Backend<S>& be = *be_;
  S* a = a_ = slots_.at({chunk, micro}).data();
  S* dresid = dresid_.data();
  S* dln = dln_.data();
  const int32_t* tok = tokens_.data() + int64_t{N} * (micro % token_slots_);
  const int32_t* tgt = targets_.data() + int64_t{N} * (micro % token_slots_);
  const bool embeds = embed_unit_ >= 0 && chunk == 0, heads = head_unit_ >= 0 && chunk + 1 == num_chunks();
  const int hu = head_unit();
  if (!heads) {  // stage entry: the received gradient of the chunk's output
    be.copy(dresid, dout, int64_t{N} * C);
  } else {
  // d(loss_scale x mean loss)/dloss = loss_scale; probs become dlogits in place.
  timed(Op::kLoss, [&] {
    be.crossentropy_backward(a + logits_, a + logits_, tgt, loss_scale, N, V);
  });
  acquire(hu, 'B');
  if (tied_embed_) acquire(embed_unit_, 'B');  // the head's weight is wte: its gradient accumulates there
  const S* ph = P(hu);
  S* gh = G(hu);
  const S* head_w = tied_embed_ ? P(embed_unit_) + head_w_ : ph + head_w_;
  S* dhead_w = tied_embed_ ? G(embed_unit_) + head_w_ : gh + head_w_;
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
  }
  // dresid now holds d(res3 of the last layer); each layer turns it into d(its input).
  for (int l = chunks_[static_cast<size_t>(chunk)].second - 1; l >= chunks_[static_cast<size_t>(chunk)].first; --l) {
    trace_layer_ = l;
    const int u = bu_[static_cast<size_t>(l)];
    acquire(u, 'B');
    const S* p = P(u);
    S* g = G(u);
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
    release(u, 'B');
    grads_ready(units_[u].lo, units_[u].hi);
  }
  trace_layer_ = -1;
  // Stage exit: the gradient of the chunk's input to `din`, or the embedding backward.
  if (embeds) {
  if (!tied_embed_ || !heads) acquire(embed_unit_, 'B');
  S* ge = G(embed_unit_);
  timed(Op::kEmbedding,
        [&] { be.embedding_backward(ge + wte_, ge + wpe_, dresid, tok, B, T, C); });
  release(embed_unit_, 'B');
  grads_ready(units_[embed_unit_].lo, units_[embed_unit_].hi);
  } else {
    be.copy(din, dresid, int64_t{N} * C);
  }
  if (opts_.stage) slots_.erase({chunk, micro});  // the micro-batch's activations are freed
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
