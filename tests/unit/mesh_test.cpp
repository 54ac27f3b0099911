// Tests of the rank grid (src/comm/mesh.hpp): golden group lists written by hand from the
// definition (rank = sum of coordinate * stride, leftmost dimension of the order fastest),
// property tests over every factorisation of worlds up to 64, and one test per validation rule.
#include "comm/mesh.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <set>
#include <string>

#include "core/error.hpp"

namespace meshbench::comm {
namespace {

using G = std::vector<RankList>;

RankGrid grid(int world, std::string_view mesh, std::string_view order = kDefaultOrder) {
  return RankGrid(world, parse_mesh(mesh), order);
}

// Expects a UsageError whose message contains every one of `parts`.
template <typename F>
void expect_usage(F&& f, std::initializer_list<std::string_view> parts) {
  try {
    f();
    ADD_FAILURE() << "expected core::UsageError";
  } catch (const core::UsageError& e) {
    const std::string msg = e.what();
    for (std::string_view p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

// ---- parsing -------------------------------------------------------------------------------

TEST(MeshParse, MeshSpecKeysAndDefaults) {
  const MeshSpec s = parse_mesh(" tp=2, PP=4 ,dp=8,cp=1,ep=2,etp=1,edp=16 ");
  EXPECT_EQ(s.tp, 2);
  EXPECT_EQ(s.pp, 4);
  EXPECT_EQ(s.dp, 8);
  EXPECT_EQ(s.cp, 1);
  EXPECT_EQ(s.ep, 2);
  EXPECT_EQ(s.etp, 1);
  EXPECT_EQ(s.edp, 16);
  const MeshSpec e = parse_mesh("");
  EXPECT_EQ(e.tp + e.cp + e.ep + e.dp + e.pp + e.etp + e.edp, 0);
}

TEST(MeshParse, OrderAppendsMissingDims) {
  const std::vector<Dim> o = parse_order("pp-dp");
  ASSERT_EQ(o.size(), 5u);
  EXPECT_EQ(o[0], Dim::kPp);
  EXPECT_EQ(o[1], Dim::kDp);
  EXPECT_EQ(o[2], Dim::kTp);
  EXPECT_EQ(o[3], Dim::kCp);
  EXPECT_EQ(o[4], Dim::kEp);
  EXPECT_EQ(grid(8, "tp=2", "TP-DP").order_string(), "tp-dp-cp-ep-pp");
}

TEST(MeshParse, GroupKindNamesRoundTrip) {
  for (GroupKind k : all_group_kinds()) EXPECT_EQ(parse_group_kind(group_kind_name(k)), k);
  EXPECT_EQ(parse_group_kind("DP-CP"), GroupKind::kDpCp);
  expect_usage([] { parse_group_kind("xp"); }, {"--group 'xp'", "unknown group kind", "dp-cp"});
}

// ---- golden group lists ---------------------------------------------------------------------

// world 8, tp=2 pp=2 (dp=2), order tp-cp-ep-dp-pp: rank = tp + 2*dp + 4*pp.
TEST(MeshGolden, W8Tp2Pp2Default) {
  const RankGrid g = grid(8, "tp=2,pp=2");
  EXPECT_EQ(g.degrees().dp, 2);
  EXPECT_EQ(g.groups(GroupKind::kTp), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kDp), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kPp), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kCp), (G{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(g.groups(GroupKind::kDpCp), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kTpCp), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kTpPp), (G{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kEmbedding), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kWorld), (G{{0, 1, 2, 3, 4, 5, 6, 7}}));
  // etp defaults to tp: the expert grid is the dense one with ep = 1.
  EXPECT_EQ(g.degrees().etp, 2);
  EXPECT_EQ(g.degrees().edp, 2);
  EXPECT_EQ(g.groups(GroupKind::kEtp), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kEdp), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kEp), (G{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
}

// world 8, order dp-tp-pp: rank = dp + 2*tp + 4*pp.
TEST(MeshGolden, W8OrderDpTpPp) {
  const RankGrid g = grid(8, "tp=2,pp=2,dp=2", "dp-tp-pp");
  EXPECT_EQ(g.order_string(), "dp-tp-pp-cp-ep");
  EXPECT_EQ(g.groups(GroupKind::kTp), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kDp), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kPp), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kTpPp), (G{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

// world 8, order pp-tp-dp (pp fastest): rank = pp + 2*tp + 4*dp. edp == dp, so allowed.
TEST(MeshGolden, W8OrderPpFirst) {
  const RankGrid g = grid(8, "tp=2,pp=2", "pp-tp-dp");
  EXPECT_EQ(g.groups(GroupKind::kPp), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kTp), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kDp), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.groups(GroupKind::kEmbedding), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

// world 16, tp=2 pp=4 (dp=2): the example of Megatron-LM's initialize_model_parallel docstring.
TEST(MeshGolden, W16Tp2Pp4) {
  const RankGrid g = grid(16, "tp=2,pp=4");
  EXPECT_EQ(g.groups(GroupKind::kDp),
            (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kTp),
            (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kPp), (G{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kEmbedding), (G{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
}

// world 16, tp=2 pp=2 dp=4, default order: rank = tp + 2*dp + 8*pp (the mesh_info golden).
TEST(MeshGolden, W16Tp2Pp2Dp4Coordinates) {
  const RankGrid g = grid(16, "tp=2,pp=2,dp=4");
  const Coord c = g.coord(13);  // 13 = 1 + 2*2 + 8*1
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.cp, 0);
  EXPECT_EQ(c.dp, 2);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(g.rank_of(Coord{0, 0, 3, 1}), 14);
  EXPECT_EQ(g.groups(GroupKind::kDp), (G{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kPp),
            (G{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kTpPp), (G{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  const Membership m = *g.membership(GroupKind::kDp, 13);
  EXPECT_EQ(m.group, 3);
  EXPECT_EQ(m.index, 2);
  EXPECT_THROW(g.rank_of(Coord{2, 0, 0, 0}), std::out_of_range);
}

// world 16, tp=2 cp=2 pp=2 (dp=2), ep=2: rank = tp + 2*cp + 4*dp + 8*pp;
// expert grid (etp=2, ep=2, edp=2, pp=2): rank = etp + 2*ep + 4*edp + 8*pp.
TEST(MeshGolden, W16Tp2Cp2Pp2Ep2) {
  const RankGrid g = grid(16, "tp=2,cp=2,pp=2,ep=2");
  EXPECT_EQ(g.degrees().dp, 2);
  EXPECT_EQ(g.degrees().edp, 2);
  EXPECT_EQ(g.groups(GroupKind::kCp),
            (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kDp),
            (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kPp),
            (G{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kDpCp), (G{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kTpCp), (G{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kTpPp), (G{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kEp),
            (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kEtp),
            (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kEdp),
            (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  const ExpertCoord e = g.expert_coord(14);  // 14 = 0 + 2*1 + 4*1 + 8*1
  EXPECT_EQ(e.etp, 0);
  EXPECT_EQ(e.ep, 1);
  EXPECT_EQ(e.edp, 1);
  EXPECT_EQ(e.pp, 1);
  EXPECT_EQ(g.rank_of(ExpertCoord{1, 1, 0, 1}), 11);
}

// world 16, order tp-cp-ep-pp-dp, tp=2 pp=2 (dp=4), ep=2 etp=1: dense rank = tp + 2*pp + 4*dp;
// expert rank = ep + 2*pp + 4*edp (etp*ep == tp*cp, so the pp groups agree).
TEST(MeshGolden, W16OrderPpBeforeDpExpert) {
  const RankGrid g = grid(16, "tp=2,pp=2,ep=2,etp=1", "tp-cp-ep-pp-dp");
  EXPECT_EQ(g.groups(GroupKind::kTp),
            (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kPp),
            (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kDp), (G{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kTpPp), (G{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kEp),
            (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kEdp), (G{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(g.groups(GroupKind::kEtp).size(), 16u);
  EXPECT_EQ(g.groups(GroupKind::kEmbedding), g.groups(GroupKind::kPp));
}

// world 32, tp=4 pp=2 (dp=4), ep=8 etp=1 (edp=2): dense rank = tp + 4*dp + 16*pp;
// expert rank = ep + 8*edp + 16*pp.
TEST(MeshGolden, W32Tp4Pp2Ep8) {
  const RankGrid g = grid(32, "tp=4,pp=2,ep=8,etp=1");
  EXPECT_EQ(g.degrees().edp, 2);
  EXPECT_EQ(g.groups(GroupKind::kTp), (G{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15},
                                          {16, 17, 18, 19}, {20, 21, 22, 23}, {24, 25, 26, 27},
                                          {28, 29, 30, 31}}));
  EXPECT_EQ(g.groups(GroupKind::kDp), (G{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15},
                                          {16, 20, 24, 28}, {17, 21, 25, 29}, {18, 22, 26, 30},
                                          {19, 23, 27, 31}}));
  EXPECT_EQ(g.groups(GroupKind::kPp), (G{{0, 16}, {1, 17}, {2, 18}, {3, 19}, {4, 20}, {5, 21},
                                          {6, 22}, {7, 23}, {8, 24}, {9, 25}, {10, 26}, {11, 27},
                                          {12, 28}, {13, 29}, {14, 30}, {15, 31}}));
  EXPECT_EQ(g.groups(GroupKind::kEp), (G{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15},
                                          {16, 17, 18, 19, 20, 21, 22, 23},
                                          {24, 25, 26, 27, 28, 29, 30, 31}}));
  EXPECT_EQ(g.groups(GroupKind::kEdp), (G{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14},
                                           {7, 15}, {16, 24}, {17, 25}, {18, 26}, {19, 27},
                                           {20, 28}, {21, 29}, {22, 30}, {23, 31}}));
  EXPECT_EQ(g.group_size(GroupKind::kEtp), 1);
}

// world 64, tp=2 cp=2 pp=4 (dp=4), default order: rank = tp + 2*cp + 4*dp + 16*pp.
TEST(MeshGolden, W64Tp2Cp2Pp4) {
  const RankGrid g = grid(64, "tp=2,cp=2,pp=4");
  EXPECT_EQ(g.degrees().dp, 4);
  EXPECT_EQ(g.groups(GroupKind::kPp),
            (G{{0, 16, 32, 48}, {1, 17, 33, 49}, {2, 18, 34, 50}, {3, 19, 35, 51}, {4, 20, 36, 52},
               {5, 21, 37, 53}, {6, 22, 38, 54}, {7, 23, 39, 55}, {8, 24, 40, 56}, {9, 25, 41, 57},
               {10, 26, 42, 58}, {11, 27, 43, 59}, {12, 28, 44, 60}, {13, 29, 45, 61},
               {14, 30, 46, 62}, {15, 31, 47, 63}}));
  EXPECT_EQ(g.groups(GroupKind::kDpCp),
            (G{{0, 2, 4, 6, 8, 10, 12, 14}, {1, 3, 5, 7, 9, 11, 13, 15},
               {16, 18, 20, 22, 24, 26, 28, 30}, {17, 19, 21, 23, 25, 27, 29, 31},
               {32, 34, 36, 38, 40, 42, 44, 46}, {33, 35, 37, 39, 41, 43, 45, 47},
               {48, 50, 52, 54, 56, 58, 60, 62}, {49, 51, 53, 55, 57, 59, 61, 63}}));
  EXPECT_EQ(g.groups(GroupKind::kDp)[0], (RankList{0, 4, 8, 12}));
  EXPECT_EQ(g.groups(GroupKind::kDp)[2], (RankList{2, 6, 10, 14}));  // group 2: tp=0, cp=1
  EXPECT_EQ(g.groups(GroupKind::kCp)[5], (RankList{9, 11}));         // tp=1, dp=2
  EXPECT_EQ(g.groups(GroupKind::kTpCp)[15], (RankList{60, 61, 62, 63}));
  EXPECT_EQ(g.groups(GroupKind::kEmbedding),
            (G{{0, 48}, {1, 49}, {2, 50}, {3, 51}, {4, 52}, {5, 53}, {6, 54}, {7, 55}, {8, 56},
               {9, 57}, {10, 58}, {11, 59}, {12, 60}, {13, 61}, {14, 62}, {15, 63}}));
  EXPECT_FALSE(g.membership(GroupKind::kEmbedding, 16).has_value());  // a middle stage
  EXPECT_EQ(g.membership(GroupKind::kEmbedding, 63)->index, 1);
}

// ---- properties over every factorisation -----------------------------------------------------

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// Coordinates of a rank by the definition, for both grids, indexed by Dim (tp, cp, ep, dp, pp).
std::array<int, 5> coords_by_definition(int rank, const std::vector<Dim>& order, const std::array<int, 5>& size) {
  std::array<int, 5> c{};
  for (Dim d : order) {
    c[static_cast<int>(d)] = rank % size[static_cast<int>(d)];
    rank /= size[static_cast<int>(d)];
  }
  return c;
}

// Which Dims each kind varies, and whether it lives in the expert grid.
struct KindDef {
  GroupKind kind;
  std::vector<Dim> dims;
  bool expert;
};
const std::vector<KindDef>& kind_defs() {
  static const std::vector<KindDef> defs = {
      {GroupKind::kWorld, {Dim::kTp, Dim::kCp, Dim::kEp, Dim::kDp, Dim::kPp}, false},
      {GroupKind::kTp, {Dim::kTp}, false},
      {GroupKind::kCp, {Dim::kCp}, false},
      {GroupKind::kDp, {Dim::kDp}, false},
      {GroupKind::kPp, {Dim::kPp}, false},
      {GroupKind::kDpCp, {Dim::kDp, Dim::kCp}, false},
      {GroupKind::kTpCp, {Dim::kTp, Dim::kCp}, false},
      {GroupKind::kTpPp, {Dim::kTp, Dim::kPp}, false},
      {GroupKind::kEp, {Dim::kEp}, true},
      {GroupKind::kEtp, {Dim::kTp}, true},
      {GroupKind::kEdp, {Dim::kDp}, true},
  };
  return defs;
}

// Checks one valid grid against the definition; returns false (with a gtest failure) on error.
void check_grid(const RankGrid& g, const std::string& label) {
  SCOPED_TRACE(label);
  const int world = g.world();
  const Degrees& d = g.degrees();
  ASSERT_EQ(int64_t{d.tp} * d.cp * d.dp * d.pp, world);
  ASSERT_EQ(int64_t{d.etp} * d.ep * d.edp * d.pp, world);
  const std::array<int, 5> dense_size = {d.tp, d.cp, 1, d.dp, d.pp};
  const std::array<int, 5> expert_size = {d.etp, 1, d.ep, d.edp, d.pp};
  std::vector<std::array<int, 5>> dense(world), expert(world);
  for (int r = 0; r < world; ++r) {
    dense[r] = coords_by_definition(r, g.order(), dense_size);
    expert[r] = coords_by_definition(r, g.order(), expert_size);
    const Coord c = g.coord(r);
    const ExpertCoord e = g.expert_coord(r);
    ASSERT_EQ((std::array<int, 5>{c.tp, c.cp, 0, c.dp, c.pp}), dense[r]) << "rank " << r;
    ASSERT_EQ((std::array<int, 5>{e.etp, 0, e.ep, e.edp, e.pp}), expert[r]) << "rank " << r;
    ASSERT_EQ(g.rank_of(c), r);
    ASSERT_EQ(g.rank_of(e), r);
  }
  for (const KindDef& k : kind_defs()) {
    SCOPED_TRACE(std::string(group_kind_name(k.kind)));
    const auto& size = k.expert ? expert_size : dense_size;
    const auto& co = k.expert ? expert : dense;
    int expect_size = 1;
    for (Dim dim : k.dims) expect_size *= size[static_cast<int>(dim)];
    const G& groups = g.groups(k.kind);
    ASSERT_EQ(static_cast<int>(groups.size()) * expect_size, world);
    ASSERT_EQ(g.group_size(k.kind), expect_size);
    std::vector<int> seen(world, 0);
    int prev_first = -1;
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const RankList& grp = groups[gi];
      ASSERT_EQ(static_cast<int>(grp.size()), expect_size);
      ASSERT_TRUE(std::is_sorted(grp.begin(), grp.end()));
      ASSERT_GT(grp.front(), prev_first);  // groups are numbered by their first rank
      prev_first = grp.front();
      for (size_t i = 0; i < grp.size(); ++i) {
        const int r = grp[i];
        ASSERT_GE(r, 0);
        ASSERT_LT(r, world);
        ASSERT_EQ(seen[r]++, 0) << "rank " << r << " in two groups";
        const auto m = g.membership(k.kind, r);
        ASSERT_TRUE(m.has_value());
        ASSERT_EQ(m->group, static_cast<int>(gi));
        ASSERT_EQ(m->index, static_cast<int>(i));
        // Members agree on every coordinate the kind does not vary.
        for (int dim = 0; dim < 5; ++dim)
          if (std::find(k.dims.begin(), k.dims.end(), static_cast<Dim>(dim)) == k.dims.end())
            ASSERT_EQ(co[r][dim], co[grp[0]][dim]) << "rank " << r << " dim " << dim;
      }
    }
  }
  // The expert grid's pp groups are the dense ones: members of a dense pp group share their
  // expert coordinates other than pp.
  for (const RankList& grp : g.groups(GroupKind::kPp))
    for (int r : grp)
      for (int dim : {0, 2, 3}) ASSERT_EQ(expert[r][dim], expert[grp[0]][dim]);
  // Embedding: first and last stage of each pp group, disjoint, one per pp group.
  const G& emb = g.groups(GroupKind::kEmbedding);
  ASSERT_EQ(emb.size(), g.groups(GroupKind::kPp).size());
  for (size_t i = 0; i < emb.size(); ++i) {
    const RankList& pp = g.groups(GroupKind::kPp)[i];
    ASSERT_EQ(emb[i], d.pp == 1 ? RankList{pp.front()} : (RankList{pp.front(), pp.back()}));
    for (int r : emb[i]) {
      ASSERT_TRUE(dense[r][4] == 0 || dense[r][4] == d.pp - 1);
    }
  }
}

// Whether the configuration is valid by the rules, decided without RankGrid.
bool valid_by_rules(int world, int tp, int cp, int pp, int ep, int etp, const std::vector<Dim>& order) {
  if (world % (tp * cp * pp) || world % (etp * ep * pp)) return false;
  const int dp = world / (tp * cp * pp), edp = world / (etp * ep * pp);
  const std::array<int, 5> dense = {tp, cp, 1, dp, pp}, expert = {etp, 1, ep, edp, pp};
  // pp groups agree iff every rank's pp coordinate and its other coordinates' "pp-less
  // remainder" are the same in both grids: compare the partitions by brute force.
  std::vector<int> dkey(world), ekey(world);
  for (int r = 0; r < world; ++r) {
    auto dc = coords_by_definition(r, order, dense), ec = coords_by_definition(r, order, expert);
    dkey[r] = ((dc[0] * 64 + dc[1]) * 64 + dc[3]);
    ekey[r] = ((ec[0] * 64 + ec[2]) * 64 + ec[3]);
  }
  for (int a = 0; a < world; ++a)
    for (int b = a + 1; b < world; ++b)
      if ((dkey[a] == dkey[b]) != (ekey[a] == ekey[b])) return false;
  bool pp_last = true;
  for (size_t p = std::find(order.begin(), order.end(), Dim::kPp) - order.begin() + 1; p < order.size(); ++p)
    if (dense[static_cast<int>(order[p])] > 1 || expert[static_cast<int>(order[p])] > 1) pp_last = false;
  if (pp > 1 && !pp_last && edp != dp) return false;
  return true;
}

void sweep(int world, const std::vector<std::string>& orders, int* valid, int* refused) {
  for (int tp : divisors(world))
    for (int cp : divisors(world / tp))
      for (int pp : divisors(world / tp / cp))
        for (int ep : divisors(world / pp))
          for (int etp : divisors(world / pp / ep))
            for (const std::string& order : orders) {
              const std::string label = fmt::format("world={} tp={} cp={} pp={} ep={} etp={} order={}",
                                                    world, tp, cp, pp, ep, etp, order);
              MeshSpec s;
              s.tp = tp, s.cp = cp, s.pp = pp, s.ep = ep, s.etp = etp;
              const bool expect = valid_by_rules(world, tp, cp, pp, ep, etp, parse_order(order));
              try {
                const RankGrid g(world, s, order);
                ASSERT_TRUE(expect) << label << " was accepted but breaks a rule";
                check_grid(g, label);
                if (::testing::Test::HasFatalFailure()) return;
                ++*valid;
              } catch (const core::UsageError& e) {
                ASSERT_FALSE(expect) << label << " refused: " << e.what();
                ++*refused;
              }
            }
}

std::vector<std::string> all_orders() {
  std::vector<std::string> names = {"cp", "dp", "ep", "pp", "tp"};  // sorted for next_permutation
  std::vector<std::string> out;
  do {
    out.push_back(fmt::format("{}", fmt::join(names, "-")));
  } while (std::next_permutation(names.begin(), names.end()));
  return out;
}

TEST(MeshProperty, EveryFactorisationUpTo64TwoOrders) {
  int valid = 0, refused = 0;
  for (int world = 1; world <= 64; ++world) {
    sweep(world, {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"}, &valid, &refused);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(valid, 1000);
  EXPECT_GT(refused, 10);  // pp-before-dp orders refuse some expert layouts
}

TEST(MeshProperty, EveryOrderPermutationSmallWorlds) {
  const std::vector<std::string> orders = all_orders();
  ASSERT_EQ(orders.size(), 120u);
  int valid = 0, refused = 0;
  for (int world : {1, 2, 4, 6, 8, 12}) {
    sweep(world, orders, &valid, &refused);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(valid, 1000);
  EXPECT_GT(refused, 100);
}

// ---- validation rules -------------------------------------------------------------------------

TEST(MeshValidate, ProductMustDivideWorld) {
  expect_usage([] { grid(12, "tp=8"); }, {"12 ranks", "tp*cp*pp = 8*1*1 = 8", "does not divide the world"});
  expect_usage([] { grid(16, "tp=2,pp=3"); }, {"does not divide the world", "world = tp*cp*dp*pp"});
}

TEST(MeshValidate, GivenDpMustAgree) {
  expect_usage([] { grid(16, "tp=2,pp=2,dp=2"); }, {"tp*cp*dp*pp = 2*1*2*2 = 8", "must equal the world size"});
}

TEST(MeshValidate, EpMustDivideDpCp) {
  // tp=1 so etp=1 = tp: ep=3 vs dp*cp = 8.
  expect_usage([] { grid(8, "ep=3"); }, {"ep=3 does not divide dp*cp = 8*1 = 8", "ep must divide dp*cp"});
  // etp defaults to tp=2: ep=4 vs dp*cp = 2.
  expect_usage([] { grid(8, "tp=2,cp=1,pp=2,ep=4"); }, {"ep=4 does not divide dp*cp = 2*1 = 2"});
  // With cp, ep may reach dp*cp.
  EXPECT_NO_THROW(grid(8, "tp=2,cp=2,ep=4"));
}

TEST(MeshValidate, ExpertProductMustMatch) {
  expect_usage([] { grid(16, "tp=2,etp=4,ep=8"); }, {"etp*ep*pp = 4*8*1 = 32", "etp*ep*edp*pp"});
  expect_usage([] { grid(16, "tp=2,ep=2,edp=2"); }, {"etp*ep*edp*pp = 2*2*2*1 = 8", "must equal the world size"});
  EXPECT_EQ(grid(16, "tp=2,ep=2,edp=4").degrees().edp, 4);
}

TEST(MeshValidate, DegreeAtLeastOne) {
  expect_usage([] { parse_mesh("tp=0"); }, {"--mesh 'tp=0'", "degree of tp must be >= 1, got 0"});
  expect_usage([] { parse_mesh("pp=-2"); }, {"degree of pp must be >= 1"});
  expect_usage([] { parse_mesh("dp=two"); }, {"degree of dp must be an integer", "'two'"});
  expect_usage([] { parse_mesh("tp=99999999999"); }, {"must be an integer"});
  MeshSpec s;
  s.cp = -1;
  expect_usage([&] { RankGrid(8, s); }, {"degree of cp must be >= 1"});
  expect_usage([] { grid(0, ""); }, {"world size must be >= 1"});
}

TEST(MeshValidate, UnknownOrDuplicateDimension) {
  expect_usage([] { parse_mesh("tp=2,xp=2"); }, {"unknown dimension 'xp'", "tp, cp, ep, dp, pp, etp, edp"});
  expect_usage([] { parse_mesh("tp2"); }, {"'tp2' is not DIM=DEGREE"});
  expect_usage([] { parse_mesh("tp=2,TP=4"); }, {"dimension tp is given twice"});
  expect_usage([] { parse_order("tp-xp-dp"); }, {"--order 'tp-xp-dp'", "unknown dimension 'xp'"});
  expect_usage([] { parse_order("tp-etp-dp"); }, {"unknown dimension 'etp'", "etp in tp's place"});
  expect_usage([] { parse_order("tp-dp-tp"); }, {"dimension tp appears twice"});
  expect_usage([] { parse_order("tp--dp"); }, {"unknown dimension ''"});
  expect_usage([] { parse_order(""); }, {"--order is empty"});
  expect_usage([] { grid(8, "tp=2", "tp-xp"); }, {"unknown dimension 'xp'"});
}

TEST(MeshValidate, OrderMustPlaceNontrivialDims) {
  expect_usage([] { grid(8, "tp=2,cp=2", "tp-dp-pp"); },
               {"leaves out cp, whose degree is 2", "every dimension of degree > 1 must appear in the order"});
  expect_usage([] { grid(8, "ep=2", "tp-cp-dp-pp"); }, {"leaves out ep, whose degree is 2"});
  EXPECT_NO_THROW(grid(8, "tp=2", "tp-dp"));  // cp, ep, pp are 1
}

TEST(MeshValidate, PpNotLastNeedsEqualDataParallel) {
  // tp=2 pp=2 dp=4, ep=4 etp=1: edp = 2 != dp = 4 with pp before dp.
  expect_usage([] { grid(16, "tp=2,pp=2,ep=4,etp=1", "tp-cp-ep-pp-dp"); },
               {"pp not last", "edp == dp", "etp*ep must equal tp*cp"});
  EXPECT_NO_THROW(grid(16, "tp=2,pp=2,ep=4,etp=1"));  // pp last: fine
}

TEST(MeshValidate, ExpertPpGroupsMustMatch) {
  // order tp-pp-cp-ep-dp, tp=2 cp=2 pp=2 (dp=2); ep=4 etp=1: edp = 2 = dp, but the dense pp
  // stride is tp=2 and the expert pp stride is etp=1.
  expect_usage([] { grid(16, "tp=2,cp=2,pp=2,ep=4,etp=1", "tp-pp-cp-ep-dp"); },
               {"other pp groups than the dense grid", "must share the pipeline groups"});
}

// ---- groups files -----------------------------------------------------------------------------

TEST(MeshGroupsFile, ParsesCommentsCommasAndBlanks) {
  const GroupSet s = parse_groups("# rails\n0 2, 4 6  # rail 0\n\n1,3,5,7\n", 8, true, "rails.txt");
  EXPECT_EQ(s.name, "custom");
  EXPECT_EQ(s.groups, (G{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(s.find(5)->group, 1);
  EXPECT_EQ(s.find(5)->index, 2);
  EXPECT_FALSE(s.find(8).has_value());
}

TEST(MeshGroupsFile, Rules) {
  expect_usage([] { parse_groups("0 1\n2 9\n", 8, false, "g.txt"); },
               {"g.txt:2: rank 9 is out of range", "[0, 8)"});
  expect_usage([] { parse_groups("0 1\n1 2\n", 8, false, "g.txt"); },
               {"g.txt:2: rank 1 is already in the group on line 1", "disjoint"});
  expect_usage([] { parse_groups("0 0\n", 8, false, "g.txt"); }, {"rank 0 is already in the group on line 1"});
  expect_usage([] { parse_groups("0 x\n", 8, false, "g.txt"); }, {"g.txt:1: 'x' is not a rank"});
  expect_usage([] { parse_groups("0 -1\n", 8, false, "g.txt"); }, {"rank -1 is out of range"});
  expect_usage([] { parse_groups("# nothing\n\n", 8, false, "g.txt"); }, {"g.txt: no groups"});
  expect_usage([] { parse_groups("0 1 2 3\n", 8, true, "g.txt"); },
               {"4 of 8 ranks are in no group, first 4", "cover every rank"});
  EXPECT_NO_THROW(parse_groups("0 1 2 3\n", 8, false, "g.txt"));
  expect_usage([] { read_groups_file("/nonexistent/groups.txt", 8, false); },
               {"--groups-file '/nonexistent/groups.txt'", "cannot open"});
}

// ---- node spans -------------------------------------------------------------------------------

TEST(MeshNodeSpan, EmulatedNodesAndKinds) {
  EXPECT_EQ(emulated_node_of_rank(6, 4), (std::vector<int>{0, 0, 0, 0, 1, 1}));
  expect_usage([] { emulated_node_of_rank(8, 0); }, {"--ranks-per-node must be >= 1"});
  const std::vector<int> nodes = emulated_node_of_rank(16, 4);
  const RankList intra = {0, 1, 2, 3}, inter = {0, 4, 8, 12}, mixed = {0, 2, 4, 6};
  EXPECT_EQ(node_span(intra, nodes).nodes, 1);
  EXPECT_EQ(node_span(intra, nodes).kind, SpanKind::kIntraNode);
  EXPECT_EQ(node_span(inter, nodes).nodes, 4);
  EXPECT_EQ(node_span(inter, nodes).kind, SpanKind::kInterNode);
  EXPECT_EQ(node_span(mixed, nodes).nodes, 2);
  EXPECT_EQ(node_span(mixed, nodes).kind, SpanKind::kMixed);
  EXPECT_EQ(node_span(RankList{5}, nodes).kind, SpanKind::kIntraNode);
  EXPECT_EQ(span_kind_name(SpanKind::kMixed), "mixed");
}

// The case: 4 ranks, tp=2 dp=2, 2 ranks per node: TP intra-node, DP inter-node.
TEST(MeshNodeSpan, DefaultOrderKeepsTpInsideNodes) {
  const RankGrid g = grid(4, "tp=2,dp=2");
  const std::vector<int> nodes = emulated_node_of_rank(4, 2);
  for (const RankList& grp : g.groups(GroupKind::kTp)) EXPECT_EQ(node_span(grp, nodes).kind, SpanKind::kIntraNode);
  for (const RankList& grp : g.groups(GroupKind::kDp)) EXPECT_EQ(node_span(grp, nodes).kind, SpanKind::kInterNode);
  EXPECT_FALSE(span_warning(GroupKind::kTp, g.groups(GroupKind::kTp), nodes).has_value());
  EXPECT_FALSE(span_warning(GroupKind::kDp, g.groups(GroupKind::kDp), nodes).has_value());
}

TEST(MeshNodeSpan, WarnsWhenTpCrossesNodes) {
  const RankGrid g = grid(16, "tp=4,pp=2");
  const std::vector<int> nodes = emulated_node_of_rank(16, 2);
  const auto w = span_warning(GroupKind::kTp, g.groups(GroupKind::kTp), nodes);
  ASSERT_TRUE(w.has_value());
  EXPECT_NE(w->find("TP group spans 2 nodes (4 of 4 groups)"), std::string::npos) << *w;
  EXPECT_NE(w->find("ranks per node (2)"), std::string::npos) << *w;
  const auto e = span_warning(GroupKind::kEtp, g.groups(GroupKind::kEtp), nodes);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->find("ETP group spans 2 nodes"), std::string::npos) << *e;
}

}  // namespace
}  // namespace meshbench::comm
