// Routing workloads for mixture-of-experts traffic (issue 13): `--routing
// learned|balanced|hot-expert|hot-rank|zipf:S|rotating`. Every mode but `learned` fixes which
// k distinct experts each token goes to from (seed, step, rank, tokens, experts, k, ep), with
// no model and no communication, so an imbalance is reproducible across EP layouts, fabrics
// and binaries: all_to_allv_bench draws its per-peer counts from it, and step_bench's MoE
// layer can use it in place of its router's choice. Experts are placed E/ep per EP rank, in
// order: expert e lives on EP rank e / (E/ep).
//
// The modes (docs/collectives.md "Routing workloads" states the same):
// - balanced:   round robin. Token t of rank r takes experts (r*T*k + t*k + j) mod E,
//               j < k: every expert gets T*k/E pairs per rank (differing by at most one
//               when E does not divide T*k), and the same over the whole group.
// - hot-expert: one hot expert h (drawn from the seed, the same every step) is one of the k
//               experts of exactly round(kHotShare * T) of a rank's T tokens (which tokens:
//               drawn from seed, step, rank); every other choice is uniform over the other
//               experts, distinct within a token.
// - hot-rank:   one hot EP rank (drawn from the seed): exactly round(kHotShare * T) tokens
//               send all k choices to its experts (min(k, E/ep) of them; the rest uniform
//               over the other experts); the other tokens choose uniformly over all experts.
// - zipf:S:     expert i of a popularity order (a permutation of the experts drawn from the
//               seed) has weight 1/(i+1)^S; each token draws k distinct experts by weight
//               without replacement (the first choice follows the weights exactly).
// - rotating:   hot-expert whose whole assignment moves by one expert every step: at step s
//               each expert id is step 0's plus s (mod E), the hot expert included.
// - learned:    the model's router decides; assign_experts() refuses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshbench::core {

enum class RoutingMode { kLearned, kBalanced, kHotExpert, kHotRank, kZipf, kRotating };

struct Routing {
  RoutingMode mode = RoutingMode::kLearned;
  double zipf_s = 0;  // the exponent S of zipf:S
};

// The share of a rank's tokens that hot-expert, hot-rank and rotating send to the hot target.
inline constexpr double kHotShare = 0.5;

// Throws UsageError naming --routing and the choices.
Routing parse_routing(std::string_view text);
std::string name(const Routing& r);  // "balanced", "zipf:1.2"

struct RoutingShape {
  std::uint64_t seed = 0;
  int step = 0;
  int rank = 0;             // which shard of tokens (the rank's index among the token holders)
  std::size_t tokens = 0;   // tokens of this rank, T
  int experts = 1;          // E
  int top_k = 1;            // k
  int ep = 1;               // EP ranks the experts are spread over
};

// Throws UsageError naming the options (--experts, --top-k, ep) unless 1 <= k <= E and
// E % ep == 0.
void check_routing_shape(const RoutingShape& s);

// The k distinct experts of each token: T*k ids, token t's at [t*k, t*k + k). Deterministic
// in (routing, shape). Throws UsageError for `learned`.
std::vector<int> assign_experts(const Routing& r, const RoutingShape& s);

// Token-expert pairs per expert (E entries) and per EP rank (ep entries: the tokens this rank
// sends to each EP rank, a token counted once per chosen expert that lives there).
std::vector<std::size_t> pairs_per_expert(const std::vector<int>& assignment, int experts);
std::vector<std::size_t> pairs_per_ep_rank(const std::vector<int>& assignment, int experts, int ep);

}  // namespace meshbench::core
