// Model configuration of the step engine: the GPT shape flags, presets and the rules a
// configuration must satisfy. validate() throws core::UsageError naming the option and the
// rule (the driver turns that into exit 2). Not here: parallel degrees (later issues).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshbench::parallel {

struct GptConfig {
  int layers = 2;       // L
  int hidden = 64;      // C
  int heads = 4;        // NH
  int kv_heads = 4;     // KVH: grouped-query attention when < heads
  int ffn = 256;        // F: MLP width (default 4C)
  int seq = 64;         // T: tokens per sample in a step
  int max_seq = 64;     // rows of the position table (T may not exceed it)
  int vocab = 512;      // V
  int micro_batch = 4;  // B
  bool tied = true;     // LM head shares the token embedding
  // Mixture of experts (issue 13; moe.hpp): experts 0 is the dense model. Otherwise the MLP
  // of block l is E experts (each an MLP of width F) when l % moe_every == 0, routed top-k.
  int experts = 0;               // E
  int top_k = 2;                 // k <= E experts per token
  int moe_every = 1;             // every N-th block is MoE (blocks 0, N, 2N, ...)
  double capacity_factor = 0.0;  // 0: dropless; else capacity ceil(F * N * k / E) per expert
  double aux_loss_coef = 0.01;   // weight of the load-balancing loss (added to the loss)

  int head_size() const { return hidden / heads; }
  int qkv_width() const { return (heads + 2 * kv_heads) * head_size(); }
  int64_t tokens() const { return static_cast<int64_t>(micro_batch) * seq; }
  bool is_moe(int layer) const { return experts > 0 && layer % moe_every == 0; }
  int moe_blocks() const;
};

// Presets by name: tiny, small (issue 4's first benchmark shape), medium (its second),
// gpt2-124m, small-moe (small with 8 experts, top-2, dropless, in every block), and the
// published shapes llama3-8b, llama3-70b, llama3-405b, gpt3-175b (config.cpp: SwiGLU as the
// GELU MLP of equal parameters and FLOPs). Throws UsageError for an unknown name (listing the known ones).
GptConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// Throws core::UsageError: "--heads 3 must divide --hidden 64", etc. The shape's rules only;
// how large a tensor may be depends on the plan (validate_tensor_sizes).
void validate(const GptConfig& c);

// The largest tensor one rank of a real run holds under tensor parallel `tp` and context
// parallel `cp` (the logits, the materialised attention matrix when `attention_matrix`, the
// embedding, a weight, the MLP's or the experts' activations), and the flags that size it.
struct RankTensor {
  const char* flags;
  int64_t elements;
};
RankTensor largest_rank_tensor(const GptConfig& c, int tp, int cp, bool attention_matrix);
// The engine indexes a tensor with 32-bit ints: throws core::UsageError naming the flags, the
// size and the degrees when largest_rank_tensor reaches 2^31. A plan rule (step/rules.cpp) for
// runs that allocate the model; a prediction and a modelled run hold none of these tensors.
void validate_tensor_sizes(const GptConfig& c, int tp, int cp, bool attention_matrix);

std::string describe(const GptConfig& c);  // one line: L=2 C=64 NH=4 KVH=4 F=256 ...

// AdamW's settings (torch.optim.AdamW's names and defaults; --lr, --beta1, ...).
struct AdamWConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

}  // namespace meshbench::parallel
