// Expert parallel (MoE blocks with their experts spread over the ep group, issue 13): its
// rules and the bytes a run's all-to-alls must move. The MoE block (router, dispatch, experts,
// combine) is moe.hpp; the per-rank imbalance report ep_report.hpp.
#pragma once

#include <vector>

#include "expert_parallel/moe.hpp"
#include "common/config.hpp"
#include "common/grad_sync.hpp"
#include "common/plan.hpp"

namespace meshbench::parallel {

// The expert-parallel rules: ep > 1 needs MoE blocks, --experts divisible by ep, top-k <= E;
// MoE blocks under a token split (cp > 1, or --sp) route dropless (--capacity-factor 0) with
// the learned router.
void validate_expert_parallel(const Plan& plan);

// This rank's "ep" all_to_all (counts: E values per MoE block per forward) and all_to_allv
// (per MoE block and micro-batch: the dispatch sends the rows this rank routes, the combine
// the rows its experts received, and the backward both again) over the timed steps, from its
// routing totals: AnalyticBytes::total is exact, payload and wire the mean per step. Empty
// unless ep > 1.
// The MoE blocks' traffic over the groups a micro-batch's tokens are split over (MoeTokens):
// per MoE block and micro-batch the routed counts and probability sums (2E values)
// all-reduced over tp (under --sp) and over cp; under --sp the router's gradients (and at
// ep = 1 the experts') summed over tp once per step (ZeRO-3: per micro-batch).
// `moe_layers`: this rank's MoE blocks.
std::vector<AnalyticBytes> moe_split_analytic(const Plan& p, int scalar_bytes, int moe_layers);

// This rank's "etp" all_gather and reduce_scatter (expert tensor parallel, etp > 1) over the
// timed steps, from its routing totals: per MoE block and micro-batch the group's counts
// (etp x E/ep values) gathered, then the rows (etp x block x h) gathered and reduce-scattered
// in the forward and again (d(y), d(x)) in the backward. Empty unless etp > 1.
std::vector<AnalyticBytes> etp_analytic(const GptConfig& c, int ep, int etp, const EpTotals& mine, int steps,
                                        int scalar_bytes);

std::vector<AnalyticBytes> ep_analytic(const GptConfig& c, int ep, const EpTotals& mine, int steps, int scalar_bytes);

}  // namespace meshbench::parallel
