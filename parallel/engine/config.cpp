#include "config.hpp"

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
  // Every index in the engine is an int of elements per tensor; keep the largest below 2^31.
  const int64_t biggest = std::max<int64_t>(
      {c.tokens() * c.vocab, static_cast<int64_t>(c.micro_batch) * c.heads * c.seq * c.seq,
       static_cast<int64_t>(c.vocab) * c.hidden, c.tokens() * c.ffn});
  if (biggest >= (int64_t{1} << 31))
    throw core::UsageError(fmt::format(
        "--micro-batch/--seq/--vocab: a tensor of {} elements exceeds 2^31-1", biggest));
}

std::string describe(const GptConfig& c) {
  return fmt::format("L={} C={} NH={} KVH={} F={} T={} maxT={} V={} B={} head={}", c.layers,
                     c.hidden, c.heads, c.kv_heads, c.ffn, c.seq, c.max_seq, c.vocab,
                     c.micro_batch, c.tied ? "tied" : "untied");
}

}  // namespace meshbench::parallel
