#include "kernels/flops.hpp"

#include "kernels/layers.hpp"

namespace meshbench::parallel {

std::vector<GemmShape> forward_gemms(const GptConfig& c) {
  const int N = c.micro_batch * c.seq, C = c.hidden, F = c.ffn, V = c.vocab, L = c.layers;
  const int moe = c.moe_blocks(), dense = L - moe;
  std::vector<GemmShape> g{
      {"attn.qkv", N, c.qkv_width(), C, L},
      {"attn.proj", N, C, C, L},
      {"mlp.fc", N, F, C, dense},
      {"mlp.proj", N, C, F, dense},
      {"lm_head", N, V, C, 1},
  };
  if (moe > 0) {  // MoE blocks: the router, and the k experts each token is routed to
    g.push_back({"moe.router", N, c.experts, C, moe});
    g.push_back({"moe.expert.fc", N * c.top_k, F, C, moe});
    g.push_back({"moe.expert.proj", N * c.top_k, C, F, moe});
  }
  return g;
}

StepFlops step_flops(const GptConfig& c) {
  StepFlops f;
  for (const auto& g : forward_gemms(c))
    f.forward_gemm += 2.0 * g.M * g.N * g.K * g.count;
  f.backward_gemm = 2.0 * f.forward_gemm;  // dinput and dweight, each the forward's size
  const double per_product =
      2.0 * static_cast<double>(attention_block_macs(c.seq, c.head_size())) * c.micro_batch *
      c.heads * c.layers;
  f.attention_forward = 2 * per_product;   // Q K^T, P V
  f.attention_backward = 4 * per_product;  // dY V^T, dS K, dS^T Q, P^T dY
  return f;
}

double block_forward_flops(const GptConfig& c, int layer) {
  const double N = double(c.micro_batch) * c.seq, C = c.hidden, F = c.ffn;
  double macs = N * c.qkv_width() * C + N * C * C;
  macs += c.is_moe(layer) ? N * c.experts * C + 2.0 * N * c.top_k * F * C : 2.0 * N * F * C;
  return 2.0 * macs + step_flops(c).attention_forward / c.layers;
}

GemmShape largest_gemm(const GptConfig& c) {
  GemmShape best = forward_gemms(c).front();
  for (const auto& g : forward_gemms(c))
    if (g.count > 0 && static_cast<double>(g.M) * g.N * g.K > static_cast<double>(best.M) * best.N * best.K)
      best = g;
  return best;
}

}  // namespace meshbench::parallel
