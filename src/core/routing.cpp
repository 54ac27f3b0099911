#include "core/routing.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "core/hash.hpp"

namespace meshbench::core {
namespace {

constexpr const char* kChoices = "learned, balanced, hot-expert, hot-rank, zipf:S (S >= 0, e.g. zipf:1.2) or rotating";

// Salts keep the draws of different purposes apart.
enum Salt : std::uint64_t { kHotExpertSalt = 1, kHotRankSalt = 2, kHotTokensSalt = 3, kTokenSalt = 4, kZipfSalt = 5 };

// A counter-based stream of draws: the same (seed, a, b, salt) gives the same numbers on every
// rank and machine.
class Draws {
 public:
  Draws(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t salt)
      : s_(mix64(seed ^ mix64(a ^ mix64(b ^ mix64(salt))))) {}
  std::uint64_t next() { return s_ = mix64(s_); }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }

 private:
  std::uint64_t s_;
};

// Fills out[from, k) with distinct members of `pool` not already in out[0, from).
void pick_uniform(Draws& d, const std::vector<int>& pool, int* out, int from, int k) {
  for (int j = from; j < k; ++j) {
    int e;
    do e = pool[d.below(pool.size())];
    while (std::find(out, out + j, e) != out + j);
    out[j] = e;
  }
}

// The round(kHotShare * T) tokens of this rank that go to the hot target: those whose draw is
// smallest, so the count is exact and the choice of tokens looks random.
std::vector<char> hot_tokens(const RoutingShape& s, int step) {
  const std::size_t n_hot = static_cast<std::size_t>(std::llround(kHotShare * static_cast<double>(s.tokens)));
  std::vector<std::uint64_t> key(s.tokens);
  for (std::size_t t = 0; t < s.tokens; ++t)
    key[t] = Draws(s.seed, static_cast<std::uint64_t>(step), (static_cast<std::uint64_t>(s.rank) << 40) ^ t,
                   kHotTokensSalt).next();
  std::vector<std::size_t> order(s.tokens);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_hot), order.end(),
                   [&](std::size_t a, std::size_t b) { return key[a] < key[b]; });
  std::vector<char> hot(s.tokens, 0);
  for (std::size_t i = 0; i < n_hot; ++i) hot[order[i]] = 1;
  return hot;
}

// The per-token draws: one stream per (step, global token index).
Draws token_draws(const RoutingShape& s, int step, std::size_t t) {
  return Draws(s.seed, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(s.rank) * s.tokens + t, kTokenSalt);
}

std::vector<int> range(int first, int last) {
  std::vector<int> v(static_cast<std::size_t>(last - first));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int> balanced(const RoutingShape& s) {
  const auto k = static_cast<std::uint64_t>(s.top_k), E = static_cast<std::uint64_t>(s.experts);
  std::vector<int> out(s.tokens * k);
  const std::uint64_t first = static_cast<std::uint64_t>(s.rank) * s.tokens * k;
  for (std::uint64_t i = 0; i < out.size(); ++i) out[i] = static_cast<int>((first + i) % E);
  return out;
}

std::vector<int> hot_expert(const RoutingShape& s, int step) {
  const int k = s.top_k;
  const int h = static_cast<int>(Draws(s.seed, 0, 0, kHotExpertSalt).below(static_cast<std::size_t>(s.experts)));
  std::vector<int> others = range(0, s.experts);
  others.erase(others.begin() + h);
  const std::vector<char> hot = hot_tokens(s, step);
  std::vector<int> out(s.tokens * static_cast<std::size_t>(k));
  for (std::size_t t = 0; t < s.tokens; ++t) {
    Draws d = token_draws(s, step, t);
    int* o = out.data() + t * static_cast<std::size_t>(k);
    int from = 0;
    if (hot[t]) o[from++] = h;
    pick_uniform(d, others, o, from, k);
  }
  return out;
}

std::vector<int> hot_rank(const RoutingShape& s) {
  const int k = s.top_k, per = s.experts / s.ep;
  const int h = static_cast<int>(Draws(s.seed, 0, 0, kHotRankSalt).below(static_cast<std::size_t>(s.ep)));
  const std::vector<int> all = range(0, s.experts), on_hot = range(h * per, (h + 1) * per);
  std::vector<int> elsewhere = all;
  elsewhere.erase(elsewhere.begin() + h * per, elsewhere.begin() + (h + 1) * per);
  const std::vector<char> hot = hot_tokens(s, s.step);
  std::vector<int> out(s.tokens * static_cast<std::size_t>(k));
  for (std::size_t t = 0; t < s.tokens; ++t) {
    Draws d = token_draws(s, s.step, t);
    int* o = out.data() + t * static_cast<std::size_t>(k);
    if (!hot[t]) {
      pick_uniform(d, all, o, 0, k);
      continue;
    }
    const int there = std::min(k, per);
    pick_uniform(d, on_hot, o, 0, there);
    pick_uniform(d, elsewhere, o, there, k);
  }
  return out;
}

std::vector<int> zipf(const RoutingShape& s, double S) {
  const int E = s.experts, k = s.top_k;
  // The popularity order: a Fisher-Yates permutation of the experts from the seed.
  std::vector<int> order = range(0, E);
  Draws p(s.seed, 0, 0, kZipfSalt);
  for (int i = E - 1; i > 0; --i) std::swap(order[static_cast<std::size_t>(i)], order[p.below(static_cast<std::size_t>(i) + 1)]);
  std::vector<double> weight(static_cast<std::size_t>(E));
  for (int i = 0; i < E; ++i) weight[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = 1.0 / std::pow(i + 1.0, S);
  const double total = std::accumulate(weight.begin(), weight.end(), 0.0);
  std::vector<int> out(s.tokens * static_cast<std::size_t>(k));
  std::vector<char> taken(static_cast<std::size_t>(E));
  for (std::size_t t = 0; t < s.tokens; ++t) {
    Draws d = token_draws(s, s.step, t);
    std::fill(taken.begin(), taken.end(), 0);
    double left = total;
    for (int j = 0; j < k; ++j) {
      const double u = d.uniform() * left;
      double acc = 0;
      int pick = -1;
      for (int e = 0; e < E; ++e) {
        if (taken[static_cast<std::size_t>(e)]) continue;
        pick = e;  // the last free expert catches rounding at the top end
        acc += weight[static_cast<std::size_t>(e)];
        if (u < acc) break;
      }
      taken[static_cast<std::size_t>(pick)] = 1;
      left -= weight[static_cast<std::size_t>(pick)];
      out[t * static_cast<std::size_t>(k) + static_cast<std::size_t>(j)] = pick;
    }
  }
  return out;
}

}  // namespace

Routing parse_routing(std::string_view text) {
  Routing r;
  if (text == "learned") r.mode = RoutingMode::kLearned;
  else if (text == "balanced") r.mode = RoutingMode::kBalanced;
  else if (text == "hot-expert") r.mode = RoutingMode::kHotExpert;
  else if (text == "hot-rank") r.mode = RoutingMode::kHotRank;
  else if (text == "rotating") r.mode = RoutingMode::kRotating;
  else if (text.substr(0, 5) == "zipf:") {
    const std::string s(text.substr(5));
    std::size_t used = 0;
    double v = -1;
    try {
      v = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size() || !(v >= 0) || !std::isfinite(v))
      throw UsageError(fmt::format("--routing {}: the zipf exponent S must be a number >= 0 (choices: {})", text, kChoices));
    r.mode = RoutingMode::kZipf;
    r.zipf_s = v;
  } else {
    throw UsageError(fmt::format("--routing: '{}' is not a routing workload (choices: {})", text, kChoices));
  }
  return r;
}

std::string name(const Routing& r) {
  switch (r.mode) {
    case RoutingMode::kLearned: return "learned";
    case RoutingMode::kBalanced: return "balanced";
    case RoutingMode::kHotExpert: return "hot-expert";
    case RoutingMode::kHotRank: return "hot-rank";
    case RoutingMode::kZipf: return fmt::format("zipf:{}", r.zipf_s);
    case RoutingMode::kRotating: return "rotating";
  }
  return "?";
}

void check_routing_shape(const RoutingShape& s) {
  if (s.experts < 1) throw UsageError(fmt::format("--experts {}: must be at least 1", s.experts));
  if (s.top_k < 1 || s.top_k > s.experts)
    throw UsageError(fmt::format("--top-k {}: must be between 1 and --experts ({})", s.top_k, s.experts));
  if (s.ep < 1 || s.experts % s.ep != 0)
    throw UsageError(fmt::format("--experts {} must be a multiple of the EP ranks ({}): each holds E/ep experts",
                                 s.experts, s.ep));
}

std::vector<int> assign_experts(const Routing& r, const RoutingShape& s) {
  check_routing_shape(s);
  const bool needs_spare = r.mode == RoutingMode::kHotExpert || r.mode == RoutingMode::kRotating;
  if (needs_spare && s.top_k >= s.experts)
    throw UsageError(fmt::format("--routing {} needs --top-k ({}) below --experts ({}): with k = E every token "
                                 "uses every expert and nothing can be hot",
                                 name(r), s.top_k, s.experts));
  switch (r.mode) {
    case RoutingMode::kLearned:
      throw UsageError("--routing learned: the model's router decides, so there is no fixed assignment here "
                       "(choose balanced, hot-expert, hot-rank, zipf:S or rotating)");
    case RoutingMode::kBalanced: return balanced(s);
    case RoutingMode::kHotExpert: return hot_expert(s, s.step);
    case RoutingMode::kHotRank: return hot_rank(s);
    case RoutingMode::kZipf: return zipf(s, r.zipf_s);
    case RoutingMode::kRotating: {
      std::vector<int> out = hot_expert(s, 0);
      const int shift = static_cast<int>(((s.step % s.experts) + s.experts) % s.experts);
      for (int& e : out) e = (e + shift) % s.experts;
      return out;
    }
  }
  return {};
}

std::vector<std::size_t> pairs_per_expert(const std::vector<int>& assignment, int experts) {
  std::vector<std::size_t> n(static_cast<std::size_t>(experts), 0);
  for (int e : assignment) ++n[static_cast<std::size_t>(e)];
  return n;
}

std::vector<std::size_t> pairs_per_ep_rank(const std::vector<int>& assignment, int experts, int ep) {
  const int per = experts / ep;
  std::vector<std::size_t> n(static_cast<std::size_t>(ep), 0);
  for (int e : assignment) ++n[static_cast<std::size_t>(e / per)];
  return n;
}

}  // namespace meshbench::core
