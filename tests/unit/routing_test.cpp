// core/routing: the routing workloads' exact properties (issue 13).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/error.hpp"
#include "core/routing.hpp"

namespace {

using namespace meshbench::core;

RoutingShape shape(std::size_t tokens, int experts, int k, int ep, int rank = 0, int step = 0, std::uint64_t seed = 7) {
  RoutingShape s;
  s.seed = seed;
  s.step = step;
  s.rank = rank;
  s.tokens = tokens;
  s.experts = experts;
  s.top_k = k;
  s.ep = ep;
  return s;
}

void expect_distinct_in_range(const std::vector<int>& a, const RoutingShape& s) {
  ASSERT_EQ(a.size(), s.tokens * static_cast<std::size_t>(s.top_k));
  for (std::size_t t = 0; t < s.tokens; ++t) {
    std::set<int> seen;
    for (int j = 0; j < s.top_k; ++j) {
      int e = a[t * static_cast<std::size_t>(s.top_k) + static_cast<std::size_t>(j)];
      ASSERT_GE(e, 0);
      ASSERT_LT(e, s.experts);
      seen.insert(e);
    }
    ASSERT_EQ(seen.size(), static_cast<std::size_t>(s.top_k)) << "token " << t << " repeats an expert";
  }
}

TEST(Routing, ParsesEveryModeAndRefusesOthersNamingTheOption) {
  EXPECT_EQ(parse_routing("learned").mode, RoutingMode::kLearned);
  EXPECT_EQ(parse_routing("balanced").mode, RoutingMode::kBalanced);
  EXPECT_EQ(parse_routing("hot-expert").mode, RoutingMode::kHotExpert);
  EXPECT_EQ(parse_routing("hot-rank").mode, RoutingMode::kHotRank);
  EXPECT_EQ(parse_routing("rotating").mode, RoutingMode::kRotating);
  Routing z = parse_routing("zipf:1.5");
  EXPECT_EQ(z.mode, RoutingMode::kZipf);
  EXPECT_DOUBLE_EQ(z.zipf_s, 1.5);
  EXPECT_EQ(name(z), "zipf:1.5");
  EXPECT_EQ(name(parse_routing("hot-rank")), "hot-rank");
  for (const char* bad : {"hot", "zipf", "zipf:", "zipf:-1", "zipf:x", "zipf:1.5x", "Balanced", ""}) {
    try {
      parse_routing(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--routing"), std::string::npos) << m;
      EXPECT_NE(m.find("hot-expert"), std::string::npos) << m;
      EXPECT_NE(m.find("zipf:S"), std::string::npos) << m;
    }
  }
}

TEST(Routing, RefusesImpossibleShapesAndLearned) {
  EXPECT_THROW(assign_experts(parse_routing("balanced"), shape(8, 8, 9, 1)), UsageError);   // k > E
  EXPECT_THROW(assign_experts(parse_routing("balanced"), shape(8, 8, 0, 1)), UsageError);   // k < 1
  EXPECT_THROW(assign_experts(parse_routing("balanced"), shape(8, 6, 2, 4)), UsageError);   // E % ep
  EXPECT_THROW(assign_experts(parse_routing("hot-expert"), shape(8, 4, 4, 2)), UsageError); // nothing spare
  EXPECT_THROW(assign_experts(parse_routing("learned"), shape(8, 8, 2, 2)), UsageError);
  try {
    assign_experts(parse_routing("balanced"), shape(8, 6, 2, 4));
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--experts 6"), std::string::npos) << e.what();
  }
}

TEST(Routing, BalancedGivesEqualCountsPerExpertAndPerEpRank) {
  for (int rank : {0, 1, 3}) {
    RoutingShape s = shape(96, 8, 2, 4, rank);
    std::vector<int> a = assign_experts(parse_routing("balanced"), s);
    expect_distinct_in_range(a, s);
    EXPECT_EQ(pairs_per_expert(a, 8), std::vector<std::size_t>(8, 96 * 2 / 8));
    EXPECT_EQ(pairs_per_ep_rank(a, 8, 4), std::vector<std::size_t>(4, 96 * 2 / 4));
  }
  // E does not divide T*k: counts differ by at most one.
  std::vector<std::size_t> n = pairs_per_expert(assign_experts(parse_routing("balanced"), shape(13, 8, 3, 2, 1)), 8);
  EXPECT_LE(*std::max_element(n.begin(), n.end()) - *std::min_element(n.begin(), n.end()), 1u);
  EXPECT_EQ(std::accumulate(n.begin(), n.end(), std::size_t{0}), 13u * 3u);
}

TEST(Routing, HotExpertPutsTheStatedShareOnOneExpert) {
  for (int k : {1, 2}) {
    for (int step : {0, 5}) {
      RoutingShape s = shape(1000, 8, k, 2, 1, step);
      std::vector<int> a = assign_experts(parse_routing("hot-expert"), s);
      expect_distinct_in_range(a, s);
      std::vector<std::size_t> n = pairs_per_expert(a, 8);
      const auto hot = static_cast<std::size_t>(std::max_element(n.begin(), n.end()) - n.begin());
      EXPECT_EQ(n[hot], static_cast<std::size_t>(std::llround(kHotShare * 1000))) << "k=" << k;
      // Every other choice is spread over the seven other experts: none comes near the hot one.
      for (std::size_t e = 0; e < 8; ++e)
        if (e != hot) EXPECT_LT(10 * n[e], 6 * n[hot]) << "expert " << e;
    }
  }
  // The hot expert is the seed's, the same at every step and rank.
  auto hot_of = [](int rank, int step) {
    std::vector<std::size_t> n = pairs_per_expert(assign_experts(parse_routing("hot-expert"), shape(200, 8, 2, 2, rank, step)), 8);
    return std::max_element(n.begin(), n.end()) - n.begin();
  };
  EXPECT_EQ(hot_of(0, 0), hot_of(1, 3));
}

TEST(Routing, HotRankSendsTheStatedShareOfTokensToOneEpRank) {
  RoutingShape s = shape(2000, 8, 2, 2, 0);
  std::vector<int> a = assign_experts(parse_routing("hot-rank"), s);
  expect_distinct_in_range(a, s);
  std::vector<std::size_t> per = pairs_per_ep_rank(a, 8, 2);
  // Half the tokens send both choices to the hot rank; the other half choose uniformly, so
  // the hot rank gets 2000*2*(0.5 + 0.5*0.5) = 3000 pairs in expectation.
  const std::size_t hot = per[0] > per[1] ? 0 : 1;
  EXPECT_EQ(per[0] + per[1], 4000u);
  EXPECT_NEAR(static_cast<double>(per[hot]), 3000.0, 100.0);
  // Exactly: at least the hot tokens' 2000 pairs.
  EXPECT_GE(per[hot], 2000u);
}

TEST(Routing, ZipfFollowsItsWeightsOverManyTokens) {
  const int E = 8;
  const double S = 1.2;
  const std::size_t T = 200000;
  std::vector<std::size_t> n = pairs_per_expert(assign_experts(parse_routing("zipf:1.2"), shape(T, E, 1, 1)), E);
  // The popularity order is the seed's: sort the observed counts and compare with 1/(i+1)^S.
  std::sort(n.begin(), n.end(), std::greater<>());
  double total = 0;
  for (int i = 0; i < E; ++i) total += 1.0 / std::pow(i + 1.0, S);
  for (int i = 0; i < E; ++i) {
    const double want = 1.0 / std::pow(i + 1.0, S) / total;
    // Tolerance: 5 standard deviations of a binomial share, sqrt(p(1-p)/T) <= 0.0012.
    EXPECT_NEAR(static_cast<double>(n[static_cast<std::size_t>(i)]) / T, want, 0.006) << "rank " << i;
  }
  // zipf:0 is uniform.
  std::vector<std::size_t> u = pairs_per_expert(assign_experts(parse_routing("zipf:0"), shape(T, E, 2, 2)), E);
  for (std::size_t c : u) EXPECT_NEAR(static_cast<double>(c) / (2.0 * T), 1.0 / E, 0.006);
  // Top-k: still k distinct experts per token.
  RoutingShape s = shape(500, E, 3, 4);
  expect_distinct_in_range(assign_experts(parse_routing("zipf:2"), s), s);
}

TEST(Routing, RotatingShiftsEveryExpertByOnePerStep) {
  const Routing r = parse_routing("rotating");
  std::vector<int> a0 = assign_experts(r, shape(300, 8, 2, 4, 1, 0));
  for (int step : {1, 2, 9}) {
    std::vector<int> a = assign_experts(r, shape(300, 8, 2, 4, 1, step));
    ASSERT_EQ(a.size(), a0.size());
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], (a0[i] + step) % 8) << "step " << step << " pair " << i;
  }
  std::vector<std::size_t> n0 = pairs_per_expert(a0, 8), n1 = pairs_per_expert(assign_experts(r, shape(300, 8, 2, 4, 1, 1)), 8);
  const auto hot0 = std::max_element(n0.begin(), n0.end()) - n0.begin();
  const auto hot1 = std::max_element(n1.begin(), n1.end()) - n1.begin();
  EXPECT_EQ(hot1, (hot0 + 1) % 8);
  EXPECT_EQ(n0[static_cast<std::size_t>(hot0)], 150u);
}

TEST(Routing, DeterministicAndSeedDependent) {
  for (const char* mode : {"balanced", "hot-expert", "hot-rank", "zipf:1", "rotating"}) {
    const Routing r = parse_routing(mode);
    EXPECT_EQ(assign_experts(r, shape(257, 16, 2, 4, 2, 3)), assign_experts(r, shape(257, 16, 2, 4, 2, 3))) << mode;
    if (r.mode != RoutingMode::kBalanced) {
      EXPECT_NE(assign_experts(r, shape(257, 16, 2, 4, 2, 3, 7)), assign_experts(r, shape(257, 16, 2, 4, 2, 3, 8)))
          << mode << ": the seed changes nothing";
      EXPECT_NE(assign_experts(r, shape(257, 16, 2, 4, 1, 3)), assign_experts(r, shape(257, 16, 2, 4, 2, 3)))
          << mode << ": every rank draws the same tokens";
    }
  }
}

}  // namespace
