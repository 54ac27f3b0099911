// FLOPs of one training step, counted from the exact op shapes the engine runs (one place;
// docs/step_bench.md "FLOPs per step" states the formula). A multiply-add is 2 FLOPs. Counted: every GEMM of the
// forward pass (QKV, attention projection, MLP fc and proj, LM head), their backward GEMMs
// (dinput and dweight, 2x forward), and the attention score (Q K^T) and value (P V) products
// as executed in causal row blocks (forward 2 products, backward 4). Not counted: layernorm,
// softmax, GELU, cross-entropy, AdamW, embedding (O(N*C) or O(N*V) elementwise work).
// A MoE block (issue 13) counts its router (N x E x C) and its experts on N*k rows: the k
// experts each token is routed to, before capacity drops (the drops the run records lower
// the work actually done; Gpt's trace counts the kept rows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.hpp"

namespace meshbench::parallel {

struct GemmShape {
  std::string name;  // "mlp.fc", "lm_head", ...
  int M, N, K;       // C(M,N) = A(M,K) B(K,N)
  int count;         // times per forward pass (e.g. once per layer)
};

struct StepFlops {
  double forward_gemm = 0, backward_gemm = 0;  // linears
  double attention_forward = 0, attention_backward = 0;
  double total() const {
    return forward_gemm + backward_gemm + attention_forward + attention_backward;
  }
};

std::vector<GemmShape> forward_gemms(const GptConfig& c);  // the linears of one forward
StepFlops step_flops(const GptConfig& c);
GemmShape largest_gemm(const GptConfig& c);  // by M*N*K
// One micro-batch's forward FLOPs of block `layer` (its GEMMs, a MoE block's router and k
// experts, and its attention products): what --recompute full runs again per recomputed block.
double block_forward_flops(const GptConfig& c, int layer);

}  // namespace meshbench::parallel
