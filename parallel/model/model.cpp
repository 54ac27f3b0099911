// Gpt<S>: construction, the slots, the embeddings, the head, forward, backward and AdamW (llm.c's
// gpt2_* functions). The block is model_block.cpp; the parameter table, canonical weights,
// closed-form memory and synthetic data are model_layout.cpp.
#include "model/model.hpp"
#include "model/model_timed.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include <fmt/core.h>

#include "core/error.hpp"
#include "core/timer.hpp"
#include "tensor_parallel/mappings.hpp"
#include "tensor_parallel/vocab_parallel.hpp"
#include "common/sharding.hpp"

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
    case Op::kCopy: return "copy";
    case Op::kCount: break;
  }
  return "?";
}

template <typename S>
Gpt<S>::Gpt(const GptConfig& cfg, Backend<S>& be, GptOptions opts)
    : cfg_(cfg), be_(&be), opts_(opts), dims_(meshbench::parallel::tp_dims(cfg, opts.tp, opts.cp)),
      moe_(cfg, opts.ep, moe_tokens(opts)) {
  if (opts.flash && !be.flash_attention())
    throw core::UsageError("--attention flash: backend " + be.name() + " has no flash attention yet (use --attention naive)");
  ParamTable pt = param_table(cfg, opts);
  layout_ = std::move(pt.layout);
  units_ = std::move(pt.units);
  lo_ = std::move(pt.lo);
  wte_ = pt.wte;
  wpe_ = pt.wpe;
  lnf_w_ = pt.lnf_w;
  lnf_b_ = pt.lnf_b;
  head_w_ = pt.head_w;
  head_b_ = pt.head_b;
  bu_ = std::move(pt.bu);
  embed_unit_ = pt.embed_unit;
  head_unit_ = pt.head_unit;
  tied_embed_ = cfg.tied && embed_unit_ >= 0;
  chunks_ = opts.stage ? opts.stage->chunks : std::vector<std::pair<int, int>>{{0, cfg.layers}};
  token_slots_ = opts.stage ? std::max(1, opts.stage->micro_batches) : 1;
  chunk_start_.assign(static_cast<size_t>(cfg.layers) + 1, 0);
  for (const auto& [lb, le] : chunks_) chunk_start_[static_cast<size_t>(lb)] = 1;
  for (int l = 0; l < cfg.layers; ++l)
    if (cfg.is_moe(l) && bu_[static_cast<size_t>(l)] >= 0) moe_.bind(l, layout_, units_[static_cast<size_t>(bu_[static_cast<size_t>(l)])].lo);
  const int64_t P = layout_.total();
  if (opts.own_params) params_ = BackendArray<S, S>(be, P, &mem_, MemCat::kParams);
  if (opts.own_grads) grads_ = BackendArray<S, S>(be, P, &mem_, MemCat::kGrads);
  if (opts.own_optimizer) set_optimizer_shard(P);
  build_activations();
  qkv_op_ = runner("qkv");
  proj_op_ = runner("attn.proj");
  fc_op_ = runner("fc");
  fcproj_op_ = runner("fc.proj");
  head_op_ = runner("head");
  attention_op_ = runner("attention");
}

template <typename S>
void Gpt<S>::build_activations() {
  const TpDims& d = dims_;
  const int64_t L = cfg_.layers, C = cfg_.hidden, B = cfg_.micro_batch, T = cfg_.seq, N = d.tokens, n = d.rows;
  const bool tp = opts_.tp.size > 1, sp = tp && opts_.tp.mode.sp, keep = sp && !opts_.tp.mode.regather;
  if (opts_.cp.size > 1)  // counted under buffers; its per-layer state takes the place of att
    cp_attn_ = std::make_unique<CpAttention<S>>(cfg_.micro_batch, cfg_.seq, d.heads, d.kv_heads, cfg_.head_size(),
                                                opts_.cp, *be_, &mem_, opts_.flash);
  // One layout per chunk (a slot): its input at offset 0, its blocks, the head's on the last.
  la_.resize(static_cast<size_t>(L));
  recompute_ = recomputed_blocks(cfg_, opts_);
  int64_t blk_elements = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    act_layouts_.emplace_back();
    encoded_ = act_layouts_.back().add(embed_unit_ >= 0 && c == 0 ? "encoded" : "input", {n, C}, false);
    for (int64_t l = chunks_[c].first; l < chunks_[c].second; ++l) {
      const std::string p = fmt::format("h.{}.", l);
      LayerActs a{};
      // --recompute full: all but the output go to the block scratch (its own layout from 0)
      Layout scratch;
      Layout& al = recomputed(static_cast<int>(l)) ? scratch : act_layouts_.back();
      a.ln1 = al.add(p + "ln1", {n, C}, false);
      a.ln1_mean = al.add(p + "ln1_mean", {n}, false);
      a.ln1_rstd = al.add(p + "ln1_rstd", {n}, false);
      if (keep) a.ln1_full = al.add(p + "ln1_full", {N, C}, false);
      a.qkv = al.add(p + "qkv", {N, d.qkv}, false);
      a.att = cp_attn_                   ? al.add(p + "cp_attn", {cp_attn_->acts_per_layer()}, false)
              : recompute_attention()   ? -1                                         // att_scratch_
              : opts_.flash             ? al.add(p + "lse", {B, d.heads, T}, false)  // flash: a log-sum-exp per row and head
                                        : al.add(p + "att", {B, d.heads, T, T}, false);
      a.atty = al.add(p + "atty", {N, d.attn_width}, false);
      a.res2 = al.add(p + "res2", {n, C}, false);
      a.ln2 = al.add(p + "ln2", {n, C}, false);
      a.ln2_mean = al.add(p + "ln2_mean", {n}, false);
      a.ln2_rstd = al.add(p + "ln2_rstd", {n}, false);
      if (keep) a.ln2_full = al.add(p + "ln2_full", {N, C}, false);
      if (cfg_.is_moe(static_cast<int>(l))) {
        moe_.add_acts(static_cast<int>(l), al, p);
      } else {
        a.fch = al.add(p + "fch", {N, d.ffn}, false);
        a.fch_gelu = al.add(p + "fch_gelu", {N, d.ffn}, false);
      }
      a.res3 = act_layouts_.back().add(p + "res3", {n, C}, false);
      blk_elements = std::max(blk_elements, scratch.total());
      la_[static_cast<size_t>(l)] = a;
    }
    if (head_unit_ >= 0 && c + 1 == chunks_.size()) {
      Layout& al = act_layouts_.back();
      lnf_ = al.add("lnf", {n, C}, false);
      lnf_mean_ = al.add("lnf_mean", {n}, false);
      lnf_rstd_ = al.add("lnf_rstd", {n}, false);
      if (keep) lnf_full_ = al.add("lnf_full", {N, C}, false);
      logits_ = al.add("logits", {N, d.vocab}, false);  // probs, then dlogits, in place
      losses_ = al.add("losses", {N}, false);
    }
  }
  if (!opts_.stage) take_slot(0, 0);  // the whole model: one slot for the model's life
  allocate_buffers(blk_elements);
}

// The backward's and the layers' scratch (MemCat::kBuffers): gradients of the activations,
// the recomputed block's (`blk_elements`: its layout's size; 0 without --recompute full) and
// attention's, the token slots, tensor and sequence parallel's gathers.
template <typename S>
void Gpt<S>::allocate_buffers(int64_t blk_elements) {
  const TpDims& d = dims_;
  const int64_t C = cfg_.hidden, B = cfg_.micro_batch, T = cfg_.seq, N = d.tokens, n = d.rows;
  const bool tp = opts_.tp.size > 1, sp = tp && opts_.tp.mode.sp, keep = sp && !opts_.tp.mode.regather;
  const MemCat kBuf = MemCat::kBuffers;
  dresid_ = BackendArray<S, S>(*be_, n * C, &mem_, kBuf);
  dln_ = BackendArray<S, S>(*be_, N * C, &mem_, kBuf);
  datty_ = BackendArray<S, S>(*be_, N * d.attn_width, &mem_, kBuf);
  dqkv_ = BackendArray<S, S>(*be_, N * d.qkv, &mem_, kBuf);
  if (!cp_attn_ && !opts_.flash) datt_ = BackendArray<S, S>(*be_, B * d.heads * T * T, &mem_, kBuf);
  if (blk_elements > 0) {  // --recompute full
    blk_ = BackendArray<S, S>(*be_, blk_elements, &mem_, kBuf);
    slot_tokens_.resize(static_cast<size_t>(token_slots_));
    slot_step_.assign(static_cast<size_t>(token_slots_), 0);
  }
  if (recompute_attention()) {
    att_scratch_ = BackendArray<S, S>(*be_, opts_.flash ? B * d.heads * T : B * d.heads * T * T, &mem_, kBuf);
    if (!opts_.flash) atty_scratch_ = BackendArray<S, S>(*be_, N * d.attn_width, &mem_, kBuf);
  }
  dfch_ = BackendArray<S, S>(*be_, N * d.ffn, &mem_, kBuf);
  tokens_ = BackendArray<int32_t, S>(*be_, N * token_slots_, &mem_, kBuf);
  targets_ = BackendArray<int32_t, S>(*be_, N * token_slots_, &mem_, kBuf);
  moe_.allocate(*be_, &mem_, token_slots_);
  if (tp) {
    row_scratch_ = BackendArray<S, S>(*be_, (N + n) * C, &mem_, kBuf);
    ce_stats_ = BackendArray<S, S>(*be_, 3 * N, &mem_, kBuf);
  }
  if (sp) {
    dxfull_ = BackendArray<S, S>(*be_, N * C, &mem_, kBuf);
    dyfull_ = BackendArray<S, S>(*be_, N * C, &mem_, kBuf);
    if (!keep) gather_ = BackendArray<S, S>(*be_, N * C, &mem_, kBuf);
  }
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
  return layout_.numel();
}

template <typename S>
void Gpt<S>::init_weights(uint64_t seed) {
  if (opts_.own_params) upload_params(canonical_weights(seed).data());
  be_->zero(m_.data(), m_.bytes());
  be_->zero(v_.data(), v_.bytes());
}

template <typename S>
ComputeOp Gpt<S>::runner(const char* role) {
  return [this, role](const OpInfo& info, const std::function<void()>& op) { timed(info, role, op); };
}

template <typename S>
typename MoeMlp<S>::Timed Gpt<S>::moe_timed() {
  return runner("moe");
}

template <typename S>
const S* Gpt<S>::res_in(int l) const {
  return a_ + (chunk_start_[static_cast<size_t>(l)] ? encoded_ : la_[static_cast<size_t>(l) - 1].res3);
}

template <typename S>
S* Gpt<S>::take_slot(int chunk, int micro) {
  auto it = slots_.find({chunk, micro});
  if (it == slots_.end()) {
    std::vector<BackendArray<S, S>>& pool = free_slots_[chunk];
    if (pool.empty()) {
      it = slots_.emplace(std::make_pair(chunk, micro),
                          BackendArray<S, S>(*be_, slot_elements(chunk), &mem_, MemCat::kActivations)).first;
    } else {  // a freed slot of this chunk, as zeroed as a new one
      BackendArray<S, S> a = std::move(pool.back());
      pool.pop_back();
      a.track(&mem_, MemCat::kActivations);
      be_->zero(a.data(), a.bytes());
      it = slots_.emplace(std::make_pair(chunk, micro), std::move(a)).first;
    }
  }
  return it->second.data();
}

template <typename S>
S* Gpt<S>::stage_input(int chunk, int micro) {
  return take_slot(chunk, micro) + encoded_;
}

template <typename S>
const S* Gpt<S>::stage_output(int chunk, int micro) const {
  const int last = chunks_[static_cast<size_t>(chunk)].second - 1;
  return slots_.at({chunk, micro}).data() + la_[static_cast<size_t>(last)].res3;
}

// The slot and the token/target ids of (chunk, micro) become the ones in use.
template <typename S>
void Gpt<S>::use(int chunk, int micro) {
  a_ = take_slot(chunk, micro);
  token_slot_ = micro % token_slots_;
  const int64_t k = int64_t{dims_.tokens} * token_slot_;
  tok_ = tokens_.data() + k;
  tgt_ = targets_.data() + k;
  moe_.use(token_slot_);
}

template <typename S>
S* Gpt<S>::gathered(int l, int which) {
  if (opts_.tp.size <= 1 || !opts_.tp.mode.sp) return nullptr;
  if (opts_.tp.mode.regather) return gather_.data();  // one buffer, re-gathered in the backward
  if (l < 0) return a_ + lnf_full_;
  return block_base(l) + (which == 0 ? la_[l].ln1_full : la_[l].ln2_full);
}

template <typename S>
void Gpt<S>::embed_forward(const S* pe) {
  const int B = cfg_.micro_batch, C = cfg_.hidden, N = dims_.tokens;
  S* out = a_ + encoded_;
  // Context parallel: one lookup per chunk of the sequence, its positions from its start.
  const CpChunks ch = cp_chunks(cfg_.seq, opts_.cp, opts_.cp.rank);
  auto lookup = [&](S* dst, const S* wpe) {
    for (int k = 0; k < ch.count; ++k) {
      const int64_t r = int64_t{k} * B * ch.len;
      be_->embedding_forward(dst + r * C, tok_ + r, pe + wte_, wpe ? wpe + int64_t{ch.start[k]} * C : nullptr,
                             B, ch.len, C);
    }
  };
  if (tp_ == nullptr) {
    timed(Op::kEmbedding, [&] { lookup(out, pe + wpe_); });
    return;
  }
  // Vocabulary-parallel: each rank looks up the tokens in its rows (the others give 0), the
  // positions are added once (rank 0), and the partial sums are reduced over the group.
  S* partial = opts_.tp.mode.sp ? row_scratch_.data() : out;
  timed(Op::kEmbedding, [&] { lookup(partial, tp_->rank() == 0 ? pe + wpe_ : nullptr); });
  g_forward(*tp_, opts_.tp.mode.sp, partial, out, int64_t{N} * C);
}

template <typename S>
S Gpt<S>::head_forward(S* logits_out) {
  const int C = cfg_.hidden, N = dims_.tokens, n = dims_.rows, V = dims_.vocab;
  Backend<S>& be = *be_;
  S* a = a_;
  const int hu = head_unit();
  const S* ph = P(hu);
  const S* head_w = tied_embed_ ? P(embed_unit_) + head_w_ : ph + head_w_;
  timed(Op::kLayerNorm, [&] {
    be.layernorm_forward(a + lnf_, a + lnf_mean_, a + lnf_rstd_, res_in(cfg_.layers), ph + lnf_w_, ph + lnf_b_, n, C);
  });
  column_forward(be, head_op_, tp_, opts_.tp.mode, a + logits_, a + lnf_, gathered(-1, 0), head_w, ph + head_b_,
                 N, C, V);
  if (logits_out != nullptr) be.download(logits_out, a + logits_, sizeof(S) * N * V);  // before the softmax
  S loss{};
  if (tp_ == nullptr) {
    timed(Op::kLoss, [&] { loss = be.crossentropy_forward(a + logits_, a + losses_, a + logits_, tgt_, N, V); });
    return loss;
  }
  // Vocabulary-parallel cross-entropy (tensor_parallel/vocab_parallel.hpp).
  const LossTimer time = [&](const std::function<void()>& f) { timed(Op::kLoss, f); };
  return vocab_parallel_cross_entropy(be, *tp_, time, a + logits_, a + losses_, ce_stats_.data(), tgt_, N, V,
                                      dims_.vocab_valid);
}

template <typename S>
S Gpt<S>::forward(const int32_t* tokens, const int32_t* targets, S* logits_out) {
  return forward_chunk(0, 0, tokens, targets, logits_out);
}

template <typename S>
S Gpt<S>::forward_chunk(int chunk, int micro, const int32_t* tokens, const int32_t* targets, S* logits_out) {
  const int N = dims_.tokens;
  use(chunk, micro);  // stage entry: a chunk past the first stage's first finds its input received in the slot
  const bool embeds = embed_unit_ >= 0 && chunk == 0, heads = head_unit_ >= 0 && chunk + 1 == num_chunks();
  trace_phase_ = 'F';
  trace_layer_ = -1;
  moe_aux_ = 0;
  moe_.set_batch(tokens, trace_step_);  // a fixed routing workload's assignment reads them
  if (!slot_tokens_.empty() && cfg_.experts > 0) {  // --recompute full: the recomputed MoE blocks route them again
    const size_t k = static_cast<size_t>(token_slot_);
    slot_tokens_[k].assign(tokens, tokens + int64_t{cfg_.micro_batch} * cfg_.seq);
    slot_step_[k] = trace_step_;
  }
  if (tp_) tp_->set_layer(-1);
  std::vector<int32_t> tok, tgt;
  if (opts_.cp.size > 1) {  // this rank's chunks of the sequence, chunk-major
    std::vector<int> rows;
    cp_local_rows(rows, cfg_.micro_batch, cfg_.seq, opts_.cp);
    for (int r : rows) {
      tok.push_back(tokens[r]);
      tgt.push_back(targets[r]);
    }
    tokens = tok.data();
    targets = tgt.data();
  }
  if (opts_.tp.size > 1) {  // token ids as rows of this rank's vocabulary slice, -1 elsewhere
    tok.assign(tokens, tokens + N);
    tgt.assign(targets, targets + N);
    for (int32_t* v : {tok.data(), tgt.data()})
      for (int i = 0; i < N; ++i) {
        const int32_t r = v[i] - dims_.vocab_first;
        v[i] = r >= 0 && r < dims_.vocab_valid ? r : -1;
      }
    be_->upload_async(tok_, tok.data(), sizeof(int32_t) * N);
    be_->upload_async(tgt_, tgt.data(), sizeof(int32_t) * N);
  } else {  // the backend keeps a copy until its stream has run the upload: no host wait
    be_->upload_async(tok_, tokens, sizeof(int32_t) * N);
    be_->upload_async(tgt_, targets, sizeof(int32_t) * N);
  }
  if (embeds) {
    acquire(embed_unit_, 'F');
    embed_forward(P(embed_unit_));
    if (!tied_embed_ || !heads) release(embed_unit_, 'F');  // a tied head reads wte again at the end
  }
  for (int l = chunks_[static_cast<size_t>(chunk)].first; l < chunks_[static_cast<size_t>(chunk)].second; ++l) {
    trace_layer_ = l;
    if (tp_) tp_->set_layer(l);
    acquire(bu_[static_cast<size_t>(l)], 'F');
    block_forward(l);
    release(bu_[static_cast<size_t>(l)], 'F');
  }
  trace_layer_ = -1;  // embedding, final norm, head and loss are outside the blocks
  if (tp_) tp_->set_layer(-1);
  // stage exit: the output stays in the slot (stage_output); the chunk's MoE aux losses are
  // its part of the micro-batch's loss (the pipeline sums the parts over its stages)
  if (!heads) return static_cast<S>(moe_aux_);
  const int hu = head_unit();
  acquire(hu, 'F');
  const S loss = head_forward(logits_out);
  release(hu, 'F');
  if (tied_embed_) release(embed_unit_, 'F');
  return loss + static_cast<S>(moe_aux_);
}

template <typename S>
S* Gpt<S>::grads_at(int64_t offset) {
  for (size_t u = 0; u < units_.size(); ++u)
    if (offset >= units_[u].lo && offset < units_[u].hi) return G(static_cast<int>(u)) + (offset - units_[u].lo);
  throw std::out_of_range("Gpt::grads_at: element outside every unit");
}

template <typename S>
void Gpt<S>::zero_grad() {
  if (opts_.own_grads) be_->zero(grads_.data(), grads_.bytes());
}

template <typename S>
void Gpt<S>::sync_norm_grads(S* g, int64_t n) {
  if (tp_ == nullptr || !opts_.tp.mode.sp) return;
  reduce_over_tp(*tp_, g, n);
}

template <typename S>
void Gpt<S>::head_backward(S loss_scale, bool sync_replicated) {
  const int C = cfg_.hidden, N = dims_.tokens, n = dims_.rows, V = dims_.vocab;
  Backend<S>& be = *be_;
  S* a = a_;
  const int hu = head_unit();
  // d(loss_scale x mean loss)/dloss = loss_scale; probs become dlogits in place.
  timed(Op::kLoss, [&] { be.crossentropy_backward(a + logits_, a + logits_, tgt_, loss_scale, N, V); });
  acquire(hu, 'B');
  if (tied_embed_) acquire(embed_unit_, 'B');  // the head's weight is wte: its gradient accumulates there
  const S* ph = P(hu);
  S* gh = G(hu);
  const S* head_w = tied_embed_ ? P(embed_unit_) + head_w_ : ph + head_w_;
  S* dhead_w = tied_embed_ ? G(embed_unit_) + head_w_ : gh + head_w_;
  column_backward(be, head_op_, tp_, opts_.tp.mode, dln_.data(), dxfull_.data(), dhead_w, gh + head_b_, a + logits_,
                  a + lnf_, gathered(-1, 0), head_w, N, C, V);
  be.zero(dresid_.data(), sizeof(S) * n * C);
  timed(Op::kLayerNorm, [&] {
    be.layernorm_backward(dresid_.data(), gh + lnf_w_, gh + lnf_b_, dln_.data(), res_in(cfg_.layers), ph + lnf_w_,
                          a + lnf_mean_, a + lnf_rstd_, n, C);
  });
  if (sync_replicated) sync_norm_grads(gh + lnf_w_, lnf_b_ + C - lnf_w_);
  release(hu, 'B');
  grads_ready(units_[hu].lo, units_[hu].hi);
}

template <typename S>
void Gpt<S>::embed_backward() {
  const int B = cfg_.micro_batch, C = cfg_.hidden;
  // g's backward (the embedding's reduction): under SP, gather the rows.
  const S* d = g_backward(tp_, opts_.tp.mode.sp, dresid_.data(), dyfull_.data(), int64_t{dims_.rows} * C);
  S* ge = G(embed_unit_);
  const CpChunks ch = cp_chunks(cfg_.seq, opts_.cp, opts_.cp.rank);
  timed(Op::kEmbedding, [&] {
    for (int k = 0; k < ch.count; ++k) {
      const int64_t r = int64_t{k} * B * ch.len;
      be_->embedding_backward(ge + wte_, ge + wpe_ + int64_t{ch.start[k]} * C, d + r * C, tok_ + r, B, ch.len, C);
    }
  });
}

template <typename S>
void Gpt<S>::backward(S loss_scale, bool sync_replicated) {
  backward_chunk(0, 0, loss_scale, nullptr, nullptr, sync_replicated);
}

template <typename S>
void Gpt<S>::backward_chunk(int chunk, int micro, S loss_scale, const S* dout, S* din, bool sync_replicated) {
  use(chunk, micro);
  const bool embeds = embed_unit_ >= 0 && chunk == 0, heads = head_unit_ >= 0 && chunk + 1 == num_chunks();
  const int64_t rows_c = int64_t{dims_.rows} * cfg_.hidden;
  trace_phase_ = 'B';
  trace_layer_ = -1;
  loss_scale_ = loss_scale;
  if (tp_) tp_->set_layer(-1);
  if (heads)
    head_backward(loss_scale, sync_replicated);
  else  // stage entry: the received gradient of the chunk's output
    be_->copy(dresid_.data(), dout, rows_c);
  // dresid now holds d(res3 of the last layer); each layer turns it into d(its input).
  for (int l = chunks_[static_cast<size_t>(chunk)].second - 1; l >= chunks_[static_cast<size_t>(chunk)].first; --l) {
    trace_layer_ = l;
    if (tp_) tp_->set_layer(l);
    const int u = bu_[static_cast<size_t>(l)];
    acquire(u, 'B');
    if (recomputed(l)) recompute_forward(l);
    block_backward(l, sync_replicated);
    release(u, 'B');
    grads_ready(units_[u].lo, units_[u].hi);
  }
  trace_layer_ = -1;
  if (tp_) tp_->set_layer(-1);
  if (embeds) {  // stage exit: the embedding backward, or the input's gradient to `din`
    if (!tied_embed_ || !heads) acquire(embed_unit_, 'B');
    embed_backward();
    release(embed_unit_, 'B');
    grads_ready(units_[embed_unit_].lo, units_[embed_unit_].hi);
  } else {
    be_->copy(din, dresid_.data(), rows_c);
  }
  if (opts_.stage) {  // the micro-batch's activations are freed (kept for the chunk's next)
    auto it = slots_.find({chunk, micro});
    if (it != slots_.end()) {
      it->second.untrack();
      free_slots_[chunk].push_back(std::move(it->second));
      slots_.erase(it);
    }
  }
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

template class Gpt<float>;
template class Gpt<double>;

}  // namespace meshbench::parallel
