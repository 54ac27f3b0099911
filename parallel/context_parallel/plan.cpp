#include "context_parallel/plan.hpp"

#include <fmt/core.h>

#include "core/error.hpp"
#include "common/trace.hpp"

namespace meshbench::parallel {

using core::UsageError;

std::vector<AnalyticBytes> cp_analytic(const Plan& p, int sb, int layers) {
  const int C = p.degrees.cp, t = p.degrees.tp;
  if (C <= 1) return {};
  const GptConfig& c = p.model;
  const uint64_t m = static_cast<uint64_t>(p.micro_batches), L = static_cast<uint64_t>(layers < 0 ? c.layers : layers);
  const uint64_t rows = static_cast<uint64_t>(c.micro_batch) * static_cast<uint64_t>(c.seq) / static_cast<uint64_t>(C);
  const uint64_t hs = static_cast<uint64_t>(c.head_size()), q = static_cast<uint64_t>(c.heads / t) * hs,
                 kv = static_cast<uint64_t>(c.kv_heads / t) * hs, n = rows * 2 * kv * static_cast<uint64_t>(sb);
  const uint64_t per = m * L, Cu = static_cast<uint64_t>(C);
  auto row = [&](comm::Collective k, uint64_t payload) {
    return AnalyticBytes{"cp", std::string(comm::name(k)), payload, wire_bytes(k, payload, C)};
  };
  switch (p.cp_algo) {
    case CpAlgo::kRing: return {row(comm::Collective::kSendRecv, per * (3 * Cu - 2) * n)};
    case CpAlgo::kAllGather:
      return {row(comm::Collective::kAllGather, per * 2 * Cu * n), row(comm::Collective::kReduceScatter, per * Cu * n)};
    case CpAlgo::kUlysses:
      return {row(comm::Collective::kAllToAll, per * 2 * rows * (q + 2 * kv + q) * static_cast<uint64_t>(sb))};
  }
  return {};
}

void validate_context_parallel(const Plan& p) {
  const int c = p.degrees.cp, t = p.degrees.tp;
  if (c < 2) return;
  const GptConfig& m = p.model;
  const int parts = p.cp_zigzag ? 2 * c : c;
  if (m.seq % parts != 0)
    throw UsageError(fmt::format("--mesh cp={}: --seq {} must be divisible by {} ({})", c, m.seq, parts,
                                 p.cp_zigzag ? "the zig-zag split cuts the sequence into 2 x cp chunks"
                                             : "the contiguous split cuts it into cp chunks"));
  if (p.cp_algo == CpAlgo::kUlysses) {
    if ((m.heads / t) % c != 0)
      throw UsageError(fmt::format("--cp-algo ulysses with --mesh cp={}: --heads {} per tensor-parallel rank ({}) must "
                                   "be divisible by cp (the all-to-all hands each rank whole heads)", c, m.heads, m.heads / t));
    if ((m.kv_heads / t) % c != 0)
      throw UsageError(fmt::format("--cp-algo ulysses with --mesh cp={}: --kv-heads {} per tensor-parallel rank ({}) "
                                   "must be divisible by cp", c, m.kv_heads, m.kv_heads / t));
  }
  if (p.recompute == "selective" && !p.modelled_compute)
    throw UsageError("--recompute selective with context parallel (cp > 1): its ring, all-gather and Ulysses "
                     "attention keep their own state; the engine recomputes the unsplit attention core only "
                     "(use --recompute full, or cp = 1)");
  if (p.sp && (m.seq / c) % t != 0)
    throw UsageError(fmt::format("--sp with --mesh cp={},tp={}: --seq {} / cp must be divisible by tp", c, t, m.seq));
}

}  // namespace meshbench::parallel
