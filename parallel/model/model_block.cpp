// Gpt<S>'s transformer block: its forward, its backward, and --recompute full's forward again
// before the backward. The slots, the embeddings, the head and the optimizer are model.cpp.
#include "model/model.hpp"

#include "model/model_timed.hpp"
#include "tensor_parallel/mappings.hpp"

namespace meshbench::parallel {

template <typename S>
void Gpt<S>::block_forward(int l) {
  const int B = cfg_.micro_batch, T = cfg_.seq, C = cfg_.hidden, hs = cfg_.head_size(), N = dims_.tokens, n = dims_.rows;
  const TpDims& d = dims_;
  const TpMode& mode = opts_.tp.mode;
  Backend<S>& be = *be_;
  S* a = a_;
  S* b = block_base(l);  // the block's activations: the slot's, or the recomputed block's scratch
  const S* p = P(bu_[static_cast<size_t>(l)]);
  const LayerOffsets& w = lo_[l];
  const LayerActs& x = la_[l];
  const S* res = res_in(l);
  const double attn_fwd_flops = 4.0 * static_cast<double>(attention_block_macs(T, hs)) * B * d.heads;
  timed(Op::kLayerNorm, [&] {
    be.layernorm_forward(b + x.ln1, b + x.ln1_mean, b + x.ln1_rstd, res, p + w.ln1_w, p + w.ln1_b, n, C);
  });
  column_forward(be, qkv_op_, tp_, mode, b + x.qkv, b + x.ln1, gathered(l, 0), p + w.qkv_w, p + w.qkv_b, N, C, d.qkv);
  if (cp_attn_)
    cp_attn_->forward(*cp_, attention_op_, b + x.atty, b + x.att, b + x.qkv);
  else if (opts_.flash)
    timed(Op::kAttention,
          [&] {
            be.flash_attention_forward(b + x.atty, recompute_attention() ? att_scratch_.data() : b + x.att, b + x.qkv, B,
                                       T, d.heads, d.kv_heads, hs);
          },
          attn_fwd_flops);
  else
    timed(Op::kAttention, [&] {
      be.attention_forward(b + x.atty, recompute_attention() ? att_scratch_.data() : b + x.att, b + x.qkv, B, T, d.heads,
                           d.kv_heads, hs);
    }, attn_fwd_flops);
  // The residual joins the projection: res2 = res, then res2 += proj(atty).
  timed(Op::kResidual, [&] { be.copy(b + x.res2, res, int64_t{n} * C); });
  row_forward(be, proj_op_, tp_, mode, b + x.res2, b + x.atty, p + w.proj_w, p + w.proj_b, N, d.attn_width, C,
              row_scratch_.data());
  timed(Op::kLayerNorm, [&] {
    be.layernorm_forward(b + x.ln2, b + x.ln2_mean, b + x.ln2_rstd, b + x.res2, p + w.ln2_w, p + w.ln2_b, n, C);
  });
  if (cfg_.is_moe(l)) {  // res3 = res2 + MoE(ln2) (moe.hpp)
    timed(Op::kResidual, [&] { be.copy(a + x.res3, b + x.res2, int64_t{n} * C); });
    moe_aux_ += moe_.forward(l, p, b, b + x.ln2, a + x.res3, moe_timed());
    return;
  }
  column_forward(be, fc_op_, tp_, mode, b + x.fch, b + x.ln2, gathered(l, 1), p + w.fc_w, p + w.fc_b, N, C, d.ffn);
  timed(Op::kGelu, [&] { be.gelu_forward(b + x.fch_gelu, b + x.fch, int64_t{N} * d.ffn); });
  timed(Op::kResidual, [&] { be.copy(a + x.res3, b + x.res2, int64_t{n} * C); });
  row_forward(be, fcproj_op_, tp_, mode, a + x.res3, b + x.fch_gelu, p + w.fcproj_w, p + w.fcproj_b, N, d.ffn, C,
              row_scratch_.data());
}

template <typename S>
void Gpt<S>::block_backward(int l, bool sync_replicated) {
  const int B = cfg_.micro_batch, T = cfg_.seq, C = cfg_.hidden, hs = cfg_.head_size(), N = dims_.tokens, n = dims_.rows;
  const TpDims& d = dims_;
  const TpMode& mode = opts_.tp.mode;
  Backend<S>& be = *be_;
  S* b = block_base(l);  // the block's activations: the slot's, or the recomputed block's scratch
  S* dresid = dresid_.data();
  S* dln = dln_.data();
  S* dfch = dfch_.data();
  const S* p = P(bu_[static_cast<size_t>(l)]);
  S* g = G(bu_[static_cast<size_t>(l)]);
  const LayerOffsets& w = lo_[l];
  const LayerActs& x = la_[l];
  const double attn_bwd_flops = 8.0 * static_cast<double>(attention_block_macs(T, hs)) * B * d.heads;
  if (cfg_.is_moe(l)) {  // dln = d(ln2) through the MoE MLP (moe.hpp)
    moe_.backward(l, p, g, b, b + x.ln2, dresid, dln, loss_scale_, moe_timed());
  } else {
    row_backward(be, fcproj_op_, tp_, mode, dfch, g + w.fcproj_w, g + w.fcproj_b, dresid, dyfull_.data(),
                 b + x.fch_gelu, p + w.fcproj_w, N, d.ffn, C);
    timed(Op::kGelu, [&] { be.gelu_backward(dfch, b + x.fch, dfch, int64_t{N} * d.ffn); });
    column_backward(be, fc_op_, tp_, mode, dln, dxfull_.data(), g + w.fc_w, g + w.fc_b, dfch, b + x.ln2,
                    gathered(l, 1), p + w.fc_w, N, C, d.ffn);
  }
  timed(Op::kLayerNorm, [&] {  // dresid += : becomes d(res2)
    be.layernorm_backward(dresid, g + w.ln2_w, g + w.ln2_b, dln, b + x.res2, p + w.ln2_w, b + x.ln2_mean,
                          b + x.ln2_rstd, n, C);
  });
  row_backward(be, proj_op_, tp_, mode, datty_.data(), g + w.proj_w, g + w.proj_b, dresid, dyfull_.data(), b + x.atty,
               p + w.proj_w, N, d.attn_width, C);
  if (cp_attn_)
    cp_attn_->backward(*cp_, attention_op_, dqkv_.data(), datty_.data(), b + x.atty, b + x.att, b + x.qkv);
  else {
    if (recompute_attention()) {  // the attention core's forward again (hardware FLOPs, phase F), into scratch
      const double attn_fwd_flops = 4.0 * static_cast<double>(attention_block_macs(T, hs)) * B * d.heads;
      trace_phase_ = 'F';
      timed(Op::kAttention, [&] {  // flash: its output again over the kept one (the same values), lse to scratch
        if (opts_.flash)
          be.flash_attention_forward(b + x.atty, att_scratch_.data(), b + x.qkv, B, T, d.heads, d.kv_heads, hs);
        else
          be.attention_forward(atty_scratch_.data(), att_scratch_.data(), b + x.qkv, B, T, d.heads, d.kv_heads, hs);
      }, attn_fwd_flops);
      trace_phase_ = 'B';
    }
    // the probabilities (flash: the row log-sum-exp), kept or recomputed
    const S* att = recompute_attention() ? att_scratch_.data() : b + x.att;
    timed(Op::kAttention, [&] {
      if (opts_.flash)
        be.flash_attention_backward(dqkv_.data(), datty_.data(), b + x.qkv, b + x.atty, att, B, T, d.heads,
                                    d.kv_heads, hs);
      else
        be.attention_backward(dqkv_.data(), datt_.data(), datty_.data(), b + x.qkv, att, B, T, d.heads, d.kv_heads,
                              hs);
    }, attn_bwd_flops);
  }
  column_backward(be, qkv_op_, tp_, mode, dln, dxfull_.data(), g + w.qkv_w, g + w.qkv_b, dqkv_.data(), b + x.ln1,
                  gathered(l, 0), p + w.qkv_w, N, C, d.qkv);
  timed(Op::kLayerNorm, [&] {  // dresid += : becomes d(res of layer l's input)
    be.layernorm_backward(dresid, g + w.ln1_w, g + w.ln1_b, dln, res_in(l), p + w.ln1_w, b + x.ln1_mean,
                          b + x.ln1_rstd, n, C);
  });
  if (sync_replicated) sync_norm_grads(g + w.ln1_w, w.ln2_b + C - w.ln1_w);
  if (sync_replicated && cfg_.is_moe(l)) {  // SP: the router (and whole experts at ep = 1) saw this rank's rows only
    const auto [at, count] = moe_.sp_sync_range(l);
    sync_norm_grads(g + at, count);
  }
}

// --recompute full: block l's forward again from its kept input, into the block scratch, just
// before its backward (its communication too: tensor, context and expert parallel's calls run
// again, as under Megatron). Timed as phase F (hardware FLOPs); the output it writes again is
// the value already kept (the same ops on the same input). The MoE routing counts and aux loss
// of the step are the first forward's.
template <typename S>
void Gpt<S>::recompute_forward(int l) {
  const double aux = moe_aux_;
  const MoeTotals totals = moe_.totals();
  if (cfg_.is_moe(l) && !slot_tokens_.empty()) {
    const size_t k = static_cast<size_t>(token_slot_);
    moe_.set_batch(slot_tokens_[k].data(), slot_step_[k]);
  }
  trace_phase_ = 'F';
  block_forward(l);
  trace_phase_ = 'B';
  moe_aux_ = aux;
  moe_.keep_routing_totals(totals);
}

// The members defined here, for both scalar types (the class is instantiated in model.cpp).
#define MB_BLOCK_INSTANTIATE(S)                           \
  template void Gpt<S>::block_forward(int);               \
  template void Gpt<S>::block_backward(int, bool);        \
  template void Gpt<S>::recompute_forward(int);
MB_BLOCK_INSTANTIATE(float)
MB_BLOCK_INSTANTIATE(double)

}  // namespace meshbench::parallel
