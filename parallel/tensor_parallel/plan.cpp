#include "tensor_parallel/plan.hpp"

#include <fmt/core.h>

#include "core/error.hpp"
#include "common/trace.hpp"

namespace meshbench::parallel {

using core::UsageError;

std::vector<AnalyticBytes> tp_analytic(const Plan& p, int sb, int layers, bool embed, bool head, int moe_layers) {
  const int t = p.degrees.tp;
  if (t <= 1) return {};
  const GptConfig& c = p.model;
  const uint64_t m = static_cast<uint64_t>(p.micro_batches), L = static_cast<uint64_t>(layers < 0 ? c.layers : layers);
  const uint64_t Lm = static_cast<uint64_t>(moe_layers < 0 ? c.moe_blocks() : moe_layers);
  const uint64_t e = embed ? 1 : 0, h = head ? 1 : 0;
  // This rank's token rows: b x s, or b x s / cp under context parallel (its chunks of the sequence).
  const uint64_t N = static_cast<uint64_t>(c.micro_batch) * static_cast<uint64_t>(c.seq / p.degrees.cp),
                 C = static_cast<uint64_t>(c.hidden);
  const uint64_t act = N * C * static_cast<uint64_t>(sb);  // one b x s x h activation
  const uint64_t ce = 3 * N * static_cast<uint64_t>(sb);   // max, sum of exponentials, target logit
  auto row = [&](comm::Collective k, uint64_t payload) {
    return AnalyticBytes{"tp", std::string(comm::name(k)), payload, wire_bytes(k, payload, t) * 1.0};
  };
  if (!p.sp) {  // per layer: proj, fcproj forward; qkv, fc input gradients; + embedding, head
    // A MoE block has no fcproj/fc pair: replicated on the tp ranks (whole experts, ep = 1) it
    // moves nothing more; with expert (tensor) parallel each tp rank dispatches a slice of the
    // tokens, and the slices' output and d(x) (b x s x h each) and d(gates) (b x s x k) are
    // all-reduced.
    const bool sliced = p.degrees.ep > 1 || p.degrees.etp > 1;
    const uint64_t blocks = (4 * L - (sliced ? 0 : 2 * Lm) + e + h) * act;
    const uint64_t gates = sliced ? Lm * N * static_cast<uint64_t>(c.top_k) * static_cast<uint64_t>(sb) : 0;
    return {row(comm::Collective::kAllReduce, m * (blocks + gates + h * ce))};
  }
  const uint64_t r = p.sp_regather ? 1 : 0, a16 = (C + 15) / 16 * 16;
  // Norm gradients once per step (ZeRO-3: per micro-batch, its gradients leave after each):
  // per block ln1, ln2 (weight, bias), then lnf on the head's stage (its range, 16-aligned).
  const uint64_t syncs = static_cast<uint64_t>(p.replicated_grad_syncs());
  const uint64_t norms = syncs * (L * (3 * a16 + C) + h * (a16 + C)) * static_cast<uint64_t>(sb);
  // all-gathers per micro-batch: 2 forward + 2 backward (+ 2 re-gathers) per layer, the head's
  // input (+ its re-gather), the embedding's backward; reduce-scatters: 4 per layer, the
  // embedding's output and the head's input gradient. A pipeline stage has only its own. A MoE
  // block has no fc/fcproj pair: its rows stay sequence-sharded (its own traffic is
  // expert_parallel/plan.hpp's moe_split_analytic), so 1 + r gathers and 2 reduce-scatters fewer.
  const uint64_t ag = (L * (4 + 2 * r) - Lm * (2 + r) + e + h * (1 + r)) * act,
                 rs = (4 * L - 2 * Lm + e + h) * act;
  return {row(comm::Collective::kAllReduce, m * h * ce + norms), row(comm::Collective::kAllGather, m * ag),
          row(comm::Collective::kReduceScatter, m * rs)};
}

void validate_tensor_parallel(const Plan& p) {
  const int t = p.degrees.tp;
  const GptConfig& c = p.model;
  if (p.sp && t < 2) throw UsageError("--sp: sequence parallel splits the tensor-parallel group; needs --mesh tp=T with T >= 2");
  if (!p.sp_regather && !p.sp) throw UsageError("--sp-regather false: applies to sequence parallel only (add --sp)");
  if (t < 2) return;
  auto rule = [&](int v, const char* opt, const char* why) {
    if (v % t != 0)
      throw UsageError(fmt::format("--mesh tp={}: {} {} must be divisible by tp ({})", t, opt, v, why));
  };
  rule(c.heads, "--heads", "each rank holds whole query heads");
  rule(c.kv_heads, "--kv-heads", "each rank holds whole key/value heads and GQA groups");
  rule(c.ffn, "--ffn", "the MLP width is split over the group");
  if (p.sp && p.degrees.cp < 2) rule(c.seq, "--seq", "with --sp the sequence is split over the group");
}

}  // namespace meshbench::parallel
