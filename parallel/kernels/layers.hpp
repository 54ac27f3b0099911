// The step engine's layers as forward/backward pairs, in the manner of llm.c (train_gpt2.c):
// plain loops over row-major arrays, OpenMP over rows, GEMMs through compute::gemm
// (OpenBLAS). Each forward caches exactly what its backward needs; nothing is recomputed.
// Not here: the model wiring (model.hpp), sharding, devices other than the host.
//
// Dimensions: B batch, T sequence, C channels, V vocabulary, NH query heads, KVH key/value
// heads (grouped-query attention, NH % KVH == 0), hs = C / NH head size, F MLP width,
// N = B*T rows, QKV = (NH + 2*KVH) * hs the fused projection width.
//
// Accumulation rule (as llm.c): parameter gradients +=, activation gradients =, except the
// residual stream and the gradients named "+=" below, which accumulate.
//
// Scalar type T is float (the engine) or double (gradient checks); both are instantiated.
#pragma once

#include <cstdint>

#include <vector>

#include "common/config.hpp"
#include "common/layout.hpp"

namespace meshbench::parallel {

// out (B,T,C) = wte[tokens] + wpe[t]. tokens (B,T) in [0,V), wte (V,C), wpe (maxT,C).
// Vocabulary-parallel use: a token < 0 (another rank's row) contributes no wte row, and a
// null wpe adds no positions.
template <typename S>
void embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int T,
                       int C);
// dwte +=, dwpe += (scatter of dout (B,T,C) by token and position); tokens < 0 are skipped,
// a null dwpe is not computed.
template <typename S>
void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tokens, int B, int T,
                        int C);

// out (N,C) = (inp - mean) * rstd * weight + bias; caches mean (N), rstd (N).
template <typename S>
void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* weight, const S* bias,
                       int N, int C);
// dinp +=, dweight +=, dbias +=.
template <typename S>
void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                        const S* weight, const S* mean, const S* rstd, int N, int C);

// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); accumulate: out += instead of =.
// A null bias adds none.
template <typename S>
void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int C, int OC,
                    bool accumulate = false);
// dinp = dout @ weight (or += when accumulate_dinp); dweight +=, dbias +=. Any of dinp,
// dweight, dbias may be null (not computed): tensor parallel splits the input gradient
// from the weight gradient to overlap its all-reduce with the latter.
template <typename S>
void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                     const S* weight, int N, int C, int OC, bool accumulate_dinp = false);

// Attention works in row blocks of this many query rows: block [i0, i1) multiplies only the
// key columns [0, i1), so the causal upper triangle is mostly skipped (not all of it).
inline int attention_row_block(int T) { return T < 64 ? T : 64; }
// Multiply-adds of one (b, h) score product Q K^T as executed with those blocks; the value
// product P V and each of the four backward products have the same count.
inline int64_t attention_block_macs(int T, int hs) {
  const int Tb = attention_row_block(T);
  int64_t macs = 0;
  for (int i0 = 0; i0 < T; i0 += Tb) {
    const int i1 = i0 + Tb < T ? i0 + Tb : T;
    macs += static_cast<int64_t>(i1 - i0) * i1 * hs;
  }
  return macs;
}

// Causal self-attention on the fused projection qkv (B,T,QKV) laid out [q heads | k heads |
// v heads], each head hs wide. out (B,T,C) with C = NH*hs; att (B,NH,T,T) caches the
// softmax probabilities (upper triangle zero). Scores and values are per-(b,h) GEMMs.
template <typename S>
void attention_forward(S* out, S* att, const S* qkv, int B, int T, int NH, int KVH, int hs);
// dqkv = (written in full), datt is scratch (B,NH,T,T).
template <typename S>
void attention_backward(S* dqkv, S* datt, const S* dout, const S* qkv, const S* att, int B,
                        int T, int NH, int KVH, int hs);

// Causal self-attention without the T x T matrix (the FlashAttention-2 algorithm, issue 29), on
// the same fused qkv layout: per (b, h), query tiles of kFlashTileQ rows against the key tiles of
// kFlashTileK columns up to the diagonal, an online softmax (a running maximum and sum per row);
// only out (B,T,C) and the row log-sum-exp lse (B,NH,T) are kept. T need not be a multiple of a
// tile. Scratch per thread: one tile of scores and one of the output.
inline constexpr int kFlashTileQ = 64, kFlashTileK = 128;
template <typename S>
void flash_attention_forward(S* out, S* lse, const S* qkv, int B, int T, int NH, int KVH, int hs);
// dqkv (written in full) from dout, the forward's out and lse: each tile's probabilities are
// recomputed from lse (P = exp(scale Q K^T - lse)), D = rowsum(dout * out), dS = P (dO V^T - D);
// parallel over (b, kv head), key tiles outer, so dK and dV accumulate in place.
template <typename S>
void flash_attention_backward(S* dqkv, const S* dout, const S* qkv, const S* out, const S* lse, int B, int T, int NH,
                              int KVH, int hs);

// Attention between chunks of the sequence (context parallel: ring, all-gather), with the
// online-softmax merge. Queries of one chunk hold positions [q0, q0 + Tq) of each sample,
// keys and values [k0, k0 + Tk); query i sees key j when k0 + j <= q0 + i. Arrays are per
// sample b (B of them) row-major with a row stride (ld), head h at columns h*hs (q, o) or
// kv head h / (NH / KVH) (k, v). o (B, Tq, ldo) and lse (B, NH, Tq) hold the running result:
// `first` starts it (o = softmax(S) V over this chunk, lse its log-sum-exp), otherwise this
// chunk's part is merged in (lse = log(e^lse + e^lse_chunk), o weighted accordingly). A query
// row with no visible key in the chunk is left unchanged (first: o = 0, lse = -inf).
template <typename S>
void attention_chunk_forward(S* o, int ldo, S* lse, const S* q, int ldq, const S* k, int ldk, const S* v,
                             int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0, bool first);
// The backward of one chunk pair from the final lse and D = rowsum(dO * O) (attention_rowdot):
// P = exp(S - lse), dV += P^T dO, dS = P (dO V^T - D), dQ += scale dS K, dK += scale dS^T Q.
template <typename S>
void attention_chunk_backward(S* dq, int lddq, S* dk, int lddk, S* dv, int lddv, const S* dout, int lddo,
                              const S* D, const S* lse, const S* q, int ldq, const S* k, int ldk, const S* v,
                              int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0);
// D (B, NH, T) = sum over each head's hs columns of dout * o.
template <typename S>
void attention_rowdot(S* D, const S* dout, int lddo, const S* o, int ldo, int B, int T, int NH, int hs);
// dst rows (ld_dst apart) = src rows (ld_src apart), `cols` elements each; add_2d adds instead.
template <typename S>
void copy_2d(S* dst, int64_t ld_dst, const S* src, int64_t ld_src, int64_t rows, int64_t cols);
template <typename S>
void add_2d(S* dst, int64_t ld_dst, const S* src, int64_t ld_src, int64_t rows, int64_t cols);

// GELU, tanh approximation (GPT-2; torch gelu(approximate="tanh")). out, inp (N).
template <typename S>
void gelu_forward(S* out, const S* inp, int64_t N);
// dinp = dout * gelu'(inp).
template <typename S>
void gelu_backward(S* dinp, const S* inp, const S* dout, int64_t N);

// out (N) = a + b.
template <typename S>
void residual_forward(S* out, const S* a, const S* b, int64_t N);
// da +=, db += dout.
template <typename S>
void residual_backward(S* da, S* db, const S* dout, int64_t N);

// Softmax cross-entropy over V classes, mean over the N rows.
// In: logits (N,V). Out: probs (N,V) (may alias logits), losses (N). Returns the mean loss.
template <typename S>
S crossentropy_forward(S* probs, S* losses, const S* logits, const int32_t* targets, int N,
                       int V);
// dlogits (N,V) = (probs - onehot(target)) * dloss / N; may alias probs. A target < 0 (in
// another rank's vocabulary columns) has no one-hot here.
template <typename S>
void crossentropy_backward(S* dlogits, const S* probs, const int32_t* targets, S dloss, int N,
                           int V);

// Vocabulary-parallel cross-entropy (Megatron's): a rank holds V columns of the logits, the
// first `valid` real and the rest padding of a vocabulary padded to a multiple of the group.
// Three steps, an all-reduce over the group after each of the first two (max; the sums and
// target logits), so no rank builds the full logits. targets are local column indices, < 0
// where the target is another rank's.
// rowmax (N) = max over the valid columns.
template <typename S>
void crossentropy_rowmax(S* rowmax, const S* logits, int N, int V, int valid);
// probs (N,V) = exp(logits - rowmax) on valid columns, 0 on padding (may alias logits);
// sumexp (N) = their row sums; tlogit (N) = logits[target], 0 where target < 0.
template <typename S>
void crossentropy_partial(S* probs, S* sumexp, S* tlogit, const S* logits, const S* rowmax,
                          const int32_t* targets, int N, int V, int valid);
// With the group's sums: probs /= sumexp; losses = log(sumexp) - (tlogit - rowmax). Returns
// the mean loss.
template <typename S>
S crossentropy_finish(S* probs, S* losses, const S* sumexp, const S* tlogit, const S* rowmax,
                      int N, int V);

// out (N,C) += x (N,C) + bias (C): a row-parallel linear's reduced output and its bias added
// to the residual stream once, after the reduction.
template <typename S>
void bias_residual_add(S* out, const S* x, const S* bias, int N, int C);

// AdamW (torch.optim.AdamW semantics) on a flat range: param *= 1 - lr*wd, then the Adam
// step with bias corrections for step t (1-based). m, v are updated in place. Returns how
// many gradient elements were not finite (the step's divergence check reads it).
template <typename S>
int64_t adamw_update(S* param, const S* grad, S* m, S* v, int64_t n, const AdamWConfig& cfg,
                     double weight_decay, int t);

// AdamW step 1 from `params0` with `grads` over a whole flat array of `layout` (weight decay
// per tensor, fresh moments), on the host: what an optimizer that got these gradients must
// produce. Parity and --check compare an update with it instead of with another run's update,
// since step 1 moves a weight by lr g / (|g| + eps), which turns a last-bit gradient difference
// near eps into one of size lr.
std::vector<float> adamw_first_step(const Layout& layout, const std::vector<float>& params0,
                                    const std::vector<float>& grads, const AdamWConfig& cfg);

}  // namespace meshbench::parallel
