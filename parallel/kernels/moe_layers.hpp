// The mixture-of-experts operations of the step engine (issue 13) as forward/backward pairs,
// in the manner of layers.hpp: plain loops over row-major arrays, the CPU reference of the
// backend ops of the same names (backend.hpp). The expert MLPs themselves are the dense
// layers (matmul, gelu) run on each expert's rows; see moe.hpp for the wiring.
// Not here: the expert GEMMs, the aux-loss bookkeeping on the host (moe.cpp), communication.
//
// Dimensions: N token rows, C channels, E experts, k experts per token (top-k). An
// assignment is a pair (token n, choice j < k); idx (N,k) names its expert, gates (N,k) its
// weight, slot (N,k) its row in the permuted buffer (or -1: dropped by capacity).
// The permuted buffer is expert-major: expert e's rows are [offsets[e], offsets[e+1]), in
// token order inside an expert.
//
// Scalar type S is float (the engine) or double (gradient checks); both are instantiated.
#pragma once

#include <cstdint>

namespace meshbench::parallel {

// The router's probabilities and top-k. probs (N,E) = softmax(logits) over each row (probs
// may alias logits). Unless `assigned`, idx (N,k) = the k most probable experts of each row
// in descending order, ties to the lower expert index; with `assigned` idx is an input (a
// fixed assignment, distinct experts per row). gates (N,k) = probs[n, idx[n,j]] renormalised
// over the k chosen: gates[n,:] = softmax of the chosen logits.
template <typename S>
void moe_topk_forward(int32_t* idx, S* gates, S* probs, const S* logits, int N, int E, int k,
                      bool assigned);
// dlogits (N,E) = (written in full) the gradient through the renormalised gates
// (dgates (N,k)) plus, when dprobs is not null, through the full softmax from a gradient
// dprobs (E) that is the same for every row (the aux loss: dL/dprobs[n,e] = dprobs[e]).
template <typename S>
void moe_topk_backward(S* dlogits, const S* dgates, const S* dprobs, const S* probs,
                       const S* gates, const int32_t* idx, int N, int E, int k);

// The dispatch plan, deterministic in token order. Each expert keeps its first `capacity`
// assignments in token order (capacity <= 0: all of them, dropless); the rest are dropped.
// Out: slot (N,k); counts (2E+1) = [routed (E): assignments per expert before drops |
// offsets (E+1): prefix sums of the kept rows]; prob_sum (E): column sums of probs (N,E)
// (the aux loss's mean probabilities times N).
template <typename S>
void moe_plan(int32_t* slot, int32_t* counts, S* prob_sum, const int32_t* idx, const S* probs,
              int N, int E, int k, int capacity);

// xp[slot[n,j]] = x[n] (C wide) for every kept assignment.
template <typename S>
void moe_permute_forward(S* xp, const S* x, const int32_t* slot, int N, int C, int k);
// dx (N,C) = (written in full) the sum of dxp over each token's kept assignments.
template <typename S>
void moe_permute_backward(S* dx, const S* dxp, const int32_t* slot, int N, int C, int k);

// out (N,C) += sum over kept assignments j of gates[n,j] * yp[slot[n,j]] (the combine).
template <typename S>
void moe_unpermute_forward(S* out, const S* yp, const S* gates, const int32_t* slot, int N, int C,
                           int k);
// dyp[slot[n,j]] = gates[n,j] * dout[n] (=, kept rows); dgates[n,j] = dout[n] . yp[slot[n,j]]
// (=, 0 when dropped).
template <typename S>
void moe_unpermute_backward(S* dyp, S* dgates, const S* dout, const S* yp, const S* gates,
                            const int32_t* slot, int N, int C, int k);

}  // namespace meshbench::parallel
