#include "expert_parallel/plan.hpp"

#include <algorithm>
#include <fmt/core.h>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "common/trace.hpp"

namespace meshbench::parallel {

using core::UsageError;

namespace {

// MoE blocks whose micro-batch is split over ranks (context parallel's chunks, sequence
// parallel's shards): each rank routes its own rows (moe.hpp, MoeTokens).
void validate_token_split(const Plan& p) {
  const GptConfig& m = p.model;
  const bool sp = p.sp && p.degrees.tp > 1;
  if (m.moe_blocks() == 0 || (p.degrees.cp < 2 && !sp)) return;
  const std::string split = p.degrees.cp > 1 ? fmt::format("--mesh cp={}", p.degrees.cp) : std::string("--sp");
  if (m.capacity_factor > 0)
    throw UsageError(fmt::format("--capacity-factor {} with {} and MoE blocks: capacity keeps each expert's first "
                                 "assignments in the micro-batch's token order, which no rank of a split sequence "
                                 "sees whole; use --capacity-factor 0 (dropless)", m.capacity_factor, split));
  if (p.routing.mode != core::RoutingMode::kLearned)
    throw UsageError(fmt::format("--routing with {}: a fixed workload assigns the whole micro-batch's tokens, which "
                                 "no rank of a split sequence holds; use --routing learned", split));
}

}  // namespace

void validate_expert_parallel(const Plan& p) {
  validate_token_split(p);
  const GptConfig& c = p.model;
  if (p.mesh.etp > 1 && c.moe_blocks() == 0)
    throw UsageError(fmt::format("--mesh etp={}: expert tensor parallel splits each expert's MLP; needs MoE blocks "
                                 "(--experts E)", p.mesh.etp));
  if (c.moe_blocks() > 0 && c.ffn % p.degrees.etp != 0)
    throw UsageError(fmt::format("--mesh etp={}: --ffn {} must be divisible by etp (each rank holds F/etp of every "
                                 "expert's MLP; etp defaults to tp, etp=1 keeps the experts whole)",
                                 p.degrees.etp, c.ffn));
  const int ep = p.degrees.ep;
  if (ep < 2) return;
  const GptConfig& m = p.model;
  if (m.experts == 0)
    throw UsageError(fmt::format("--mesh ep={}: expert parallel places experts on ranks; needs MoE blocks (--experts E)", ep));
  if (m.experts % ep != 0)
    throw UsageError(fmt::format("--mesh ep={}: --experts {} must be divisible by ep (each rank holds E/ep experts)", ep, m.experts));
  if (m.top_k > m.experts)
    throw UsageError(fmt::format("--top-k {}: must be <= --experts {}", m.top_k, m.experts));
}

std::vector<AnalyticBytes> moe_split_analytic(const Plan& p, int sb, int moe_layers) {
  const GptConfig& c = p.model;
  const int t = p.degrees.tp, cp = p.degrees.cp;
  const bool sp = p.sp && t > 1;
  if (moe_layers == 0 || (cp < 2 && !sp)) return {};
  const uint64_t m = static_cast<uint64_t>(p.micro_batches), L = static_cast<uint64_t>(moe_layers),
                 s = static_cast<uint64_t>(sb);
  const uint64_t stats = m * L * 2 * static_cast<uint64_t>(c.experts) * s;
  auto row = [&](const char* dim, uint64_t payload, int n) {
    return AnalyticBytes{dim, std::string(comm::name(comm::Collective::kAllReduce)), payload,
                         wire_bytes(comm::Collective::kAllReduce, payload, n)};
  };
  std::vector<AnalyticBytes> a;
  if (sp) {
    const uint64_t syncs = static_cast<uint64_t>(p.replicated_grad_syncs());
    const uint64_t grads = syncs * L * static_cast<uint64_t>(moe_sp_sync_elements(c, EpSpec{p.degrees.ep, 0, p.degrees.etp, 0})) * s;
    a.push_back(row("tp", stats + grads, t));
  }
  if (cp > 1) a.push_back(row("cp", stats, cp));
  return a;
}

std::vector<AnalyticBytes> etp_analytic(const GptConfig& c, int ep, int etp, const EpTotals& mine, int steps,
                                        int sb) {
  if (etp < 2) return {};
  const uint64_t s = static_cast<uint64_t>(sb), C = static_cast<uint64_t>(c.hidden);
  const uint64_t counts = static_cast<uint64_t>(mine.etp_count_calls) * static_cast<uint64_t>(etp) *
                          static_cast<uint64_t>(c.experts / ep) * s;
  const uint64_t rows = 2 * static_cast<uint64_t>(mine.etp_rows) * C * s;  // forward and backward
  const double per = 1.0 / std::max(1, steps);
  auto row = [&](comm::Collective k, uint64_t total) {
    const uint64_t mean = static_cast<uint64_t>(static_cast<double>(total) * per + 0.5);
    AnalyticBytes a{"etp", std::string(comm::name(k)), mean, wire_bytes(k, mean, etp)};
    a.total = total;
    return a;
  };
  return {row(comm::Collective::kAllGather, counts + rows), row(comm::Collective::kReduceScatter, rows)};
}

std::vector<AnalyticBytes> ep_analytic(const GptConfig& c, int ep, const EpTotals& mine, int steps, int sb) {
  if (ep < 2) return {};
  const double row = static_cast<double>(c.hidden) * sb, per = 1.0 / std::max(1, steps);
  // forward dispatch + combine, and the backward the same rows again (own rows included)
  const uint64_t rows_total = 2 * static_cast<uint64_t>(mine.rows_sent + mine.rows_recv) * static_cast<uint64_t>(row);
  const double rows_wire = 2.0 * static_cast<double>(mine.remote_sent + mine.remote_recv) * row * per;
  const uint64_t counts_total = static_cast<uint64_t>(mine.count_calls) * static_cast<uint64_t>(c.experts) * sb;
  auto mean = [&](uint64_t total) { return static_cast<uint64_t>(static_cast<double>(total) * per + 0.5); };
  const std::string a2a(comm::name(comm::Collective::kAllToAll)), a2av(comm::name(comm::Collective::kAllToAllV));
  AnalyticBytes counts{"ep", a2a, mean(counts_total), wire_bytes(comm::Collective::kAllToAll, mean(counts_total), ep)};
  counts.total = counts_total;
  AnalyticBytes rows{"ep", a2av, mean(rows_total), rows_wire};
  rows.total = rows_total;
  return {counts, rows};
}

}  // namespace meshbench::parallel
