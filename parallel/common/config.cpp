#include "common/config.hpp"

#include <algorithm>

#include <fmt/core.h>

#include "core/error.hpp"

namespace meshbench::parallel {

namespace {
struct Named {
  const char* name;
  GptConfig cfg;
};
// layers, hidden, heads, kv_heads, ffn, seq, max_seq, vocab, micro_batch, tied
const Named kPresets[] = {
    {"tiny", {2, 64, 4, 4, 256, 64, 64, 512, 4, true}},
    {"small", {2, 256, 4, 4, 1024, 128, 128, 4096, 8, true}},
    {"medium", {4, 512, 8, 8, 2048, 256, 256, 8192, 4, true}},
    {"gpt2-124m", {12, 768, 12, 12, 3072, 1024, 1024, 50257, 1, true}},
    {"small-moe", {2, 256, 4, 4, 1024, 128, 128, 4096, 8, true, 8, 2, 1, 0.0, 0.01}},
    // Published shapes, for the step model (--plan-only --predict; too large for this engine's
    // materialised attention). Llama 3.1 (Llama 3 paper, Table 3): SwiGLU's three matrices of
    // width F equal a GELU MLP of width 1.5 F in parameters and FLOPs, so ffn = 1.5 x the
    // published 14336, 28672, 53248; vocabulary 128256 (the released tokenizer), untied.
    // GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, 12288 wide, 96 heads, context 2048.
    {"llama3-8b", {32, 4096, 32, 8, 21504, 8192, 8192, 128256, 1, false}},
    {"llama3-70b", {80, 8192, 64, 8, 43008, 8192, 8192, 128256, 1, false}},
    {"llama3-405b", {126, 16384, 128, 8, 79872, 8192, 8192, 128256, 1, false}},
    {"gpt3-175b", {96, 12288, 96, 96, 49152, 2048, 2048, 50257, 1, true}},
};
}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

GptConfig preset(const std::string& name) {
  for (const auto& p : kPresets)
    if (name == p.name) return p.cfg;
  std::string known;
  for (const auto& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  throw core::UsageError(fmt::format("--model {}: unknown preset (known: {})", name, known));
}

void validate(const GptConfig& c) {
  auto positive = [](const char* opt, int v) {
    if (v < 1) throw core::UsageError(fmt::format("{} {}: must be at least 1", opt, v));
  };
  positive("--layers", c.layers);
  positive("--hidden", c.hidden);
  positive("--heads", c.heads);
  positive("--kv-heads", c.kv_heads);
  positive("--ffn", c.ffn);
  positive("--seq", c.seq);
  positive("--max-seq", c.max_seq);
  positive("--vocab", c.vocab);
  positive("--micro-batch", c.micro_batch);
  if (c.hidden % c.heads != 0)
    throw core::UsageError(
        fmt::format("--heads {} must divide --hidden {} (head size = hidden / heads)", c.heads,
                    c.hidden));
  if (c.heads % c.kv_heads != 0)
    throw core::UsageError(fmt::format(
        "--kv-heads {} must divide --heads {} (grouped-query attention)", c.kv_heads, c.heads));
  if (c.seq > c.max_seq)
    throw core::UsageError(fmt::format(
        "--seq {} exceeds the position table (--max-seq {}): seq must be <= max-seq", c.seq,
        c.max_seq));
  if (c.experts < 0)
    throw core::UsageError(fmt::format("--experts {}: must be 0 (dense) or at least 1", c.experts));
  if (c.experts > 0) {
    if (c.top_k < 1 || c.top_k > c.experts)
      throw core::UsageError(fmt::format(
          "--top-k {}: must be between 1 and --experts {} (top-k <= E)", c.top_k, c.experts));
    if (c.experts > 1024)
      throw core::UsageError(fmt::format("--experts {}: at most 1024", c.experts));
    positive("--moe-every", c.moe_every);
    if (!(c.capacity_factor >= 0))
      throw core::UsageError(fmt::format(
          "--capacity-factor {}: must be >= 0 (0: dropless)", c.capacity_factor));
    if (!(c.aux_loss_coef >= 0))
      throw core::UsageError(fmt::format("--aux-loss-coef {}: must be >= 0", c.aux_loss_coef));
  }
}

RankTensor largest_rank_tensor(const GptConfig& c, int tp, int cp, bool attention_matrix) {
  const int64_t t = std::max(1, tp), p = std::max(1, cp);
  const int64_t C = c.hidden, F = c.ffn, Vr = (int64_t{c.vocab} + t - 1) / t, T = c.seq;
  const int64_t tokens = c.tokens() / p;  // a rank's rows: context parallel splits the sequence
  const RankTensor tensors[] = {
      {"--micro-batch/--seq/--vocab (the logits: b x seq/cp rows, vocab/tp columns)", tokens * Vr},
      // The probabilities of the materialised attention: heads/tp of them, each (seq/cp) x seq
      // (context parallel's chunks against every key, or Ulysses' heads/cp over the whole seq).
      {"--micro-batch/--heads/--seq (the attention matrix: b x heads/tp x seq/cp x seq)",
       attention_matrix ? int64_t{c.micro_batch} * (c.heads / t) * (T / p) * T : 0},
      {"--vocab/--hidden (the embedding: vocab/tp x hidden)", Vr * C},
      {"--hidden (the QKV weight: 3 x hidden x hidden/tp)", 3 * C * C / t},
      {"--hidden/--ffn (an MLP weight: hidden x ffn/tp)", C * F / t},
      {"--micro-batch/--seq/--ffn (the MLP activations: b x seq/cp rows, ffn/tp columns)", tokens * (F / t)},
      {"--top-k/--ffn (the expert activations: b x seq/cp x top-k rows, ffn columns)",
       c.experts > 0 ? tokens * c.top_k * F : 0}};
  RankTensor biggest = tensors[0];
  for (const RankTensor& x : tensors)
    if (x.elements > biggest.elements) biggest = x;
  return biggest;
}

void validate_tensor_sizes(const GptConfig& c, int tp, int cp, bool attention_matrix) {
  const RankTensor big = largest_rank_tensor(c, tp, cp, attention_matrix);
  if (big.elements >= (int64_t{1} << 31))
    throw core::UsageError(fmt::format(
        "{}: a tensor of {} elements on each rank at tp={} cp={} exceeds 2^31-1 (the engine indexes a tensor with "
        "32-bit ints); more tp or cp shrinks it, and a prediction (--plan-only --predict) has no such limit",
        big.flags, big.elements, std::max(1, tp), std::max(1, cp)));
}

int GptConfig::moe_blocks() const {
  int n = 0;
  for (int l = 0; l < layers; ++l) n += is_moe(l) ? 1 : 0;
  return n;
}

std::string describe(const GptConfig& c) {
  std::string s = fmt::format("L={} C={} NH={} KVH={} F={} T={} maxT={} V={} B={} head={}",
                              c.layers, c.hidden, c.heads, c.kv_heads, c.ffn, c.seq, c.max_seq,
                              c.vocab, c.micro_batch, c.tied ? "tied" : "untied");
  if (c.experts > 0)
    s += fmt::format(" E={} k={} moe_every={} capacity={} aux={}", c.experts, c.top_k,
                     c.moe_every, c.capacity_factor, c.aux_loss_coef);
  return s;
}

}  // namespace meshbench::parallel
