#include "pipeline_parallel/plan.hpp"

#include <fmt/core.h>

#include "core/error.hpp"

namespace meshbench::parallel {

using core::UsageError;

void validate_pipeline_parallel(const Plan& p) {
  const int P = p.degrees.pp, V = p.vpp, L = p.model.layers;
  const std::string broken = pipeline_rule_broken(p.schedule, pipe_shape(p));
  if (!broken.empty()) throw UsageError(broken);
  if (p.layers_per_stage.empty()) {
    if (L < P * V)  // no split can help: every virtual stage needs a layer
      throw UsageError(fmt::format("--layers {} with pp x vpp = {} x {}: every virtual stage needs at least one "
                                   "layer, so --layers must be at least {} (or lower pp or vpp)",
                                   L, P, V, P * V));
    if (L % (P * V) != 0)
      throw UsageError(fmt::format("--layers {} is not divisible by pp x vpp = {} x {}: give --layers-per-stage "
                                   "(layers of each virtual stage, {} entries of at least 1 summing to {})",
                                   L, P, V, P * V, L));
    return;
  }
  const auto& ls = p.layers_per_stage;
  if (static_cast<int>(ls.size()) != P * V)
    throw UsageError(fmt::format("--layers-per-stage: {} entries, but pp x vpp = {} x {} virtual stages need {}",
                                 ls.size(), P, V, P * V));
  int sum = 0;
  for (int n : ls) {
    if (n < 1) throw UsageError(fmt::format("--layers-per-stage: every virtual stage needs at least 1 layer (got {})", n));
    sum += n;
  }
  if (sum != L)
    throw UsageError(fmt::format("--layers-per-stage: the entries sum to {}, not to --layers {}", sum, L));
}
PipeShape pipe_shape(const Plan& p) {
  return PipeShape{p.degrees.pp, p.micro_batches, p.vpp, p.vpp_group};
}

std::vector<int> layers_per_virtual_stage(const Plan& p) {
  const int n = p.degrees.pp * p.vpp;
  if (!p.layers_per_stage.empty()) return p.layers_per_stage;
  return std::vector<int>(static_cast<size_t>(n), p.model.layers / n);
}

std::vector<std::pair<int, int>> stage_chunks(const Plan& p, int pp_rank) {
  const int P = p.degrees.pp, V = p.vpp;
  const std::vector<int> per = layers_per_virtual_stage(p);
  std::vector<std::pair<int, int>> chunks;
  int lo = 0;
  for (int vs = 0; vs < P * V; ++vs) {
    const int hi = lo + per[static_cast<size_t>(vs)];
    if (vs % P == pp_rank) chunks.emplace_back(lo, hi);
    lo = hi;
  }
  return chunks;
}

}  // namespace meshbench::parallel
