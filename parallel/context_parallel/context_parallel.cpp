#include "context_parallel/context_parallel.hpp"

#include "vocab/trace.hpp"

namespace meshbench::parallel {

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

}  // namespace meshbench::parallel
