// Rank grid, group lists, groups files and node spans: see mesh.hpp for the definitions.
#include "comm/mesh.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/error.hpp"

namespace meshbench::comm {
namespace {

using core::UsageError;

constexpr std::array<std::string_view, kNumDims> kDimNames = {"tp", "cp", "ep", "dp", "pp"};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits on any of `seps`, keeping empty pieces.
std::vector<std::string_view> split(std::string_view s, std::string_view seps) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || seps.find(s[i]) != std::string_view::npos) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

std::optional<int> to_int(std::string_view s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// One grid laid out along the order: size and stride of each order position.
struct Layout {
  std::array<int, kNumDims> size{};    // by order position
  std::array<int, kNumDims> stride{};  // by order position, prefix products
};

Layout make_layout(const std::vector<Dim>& order, const std::array<int, kNumDims>& size_by_dim) {
  Layout l;
  int stride = 1;
  for (int p = 0; p < kNumDims; ++p) {
    l.size[p] = size_by_dim[static_cast<int>(order[p])];
    l.stride[p] = stride;
    stride *= l.size[p];
  }
  return l;
}

// The groups spanned by the masked order positions (Megatron-LM's orthogonal groups): members
// enumerate the masked positions, groups the unmasked ones, leftmost fastest in both.
std::vector<RankList> masked_groups(int world, const Layout& l, const std::array<bool, kNumDims>& mask) {
  int gsize = 1;
  for (int p = 0; p < kNumDims; ++p)
    if (mask[p]) gsize *= l.size[p];
  const int ngroups = world / gsize;
  std::vector<RankList> groups(ngroups, RankList(gsize));
  for (int g = 0; g < ngroups; ++g) {
    int base = 0, rem = g;
    for (int p = 0; p < kNumDims; ++p) {
      if (mask[p]) continue;
      base += (rem % l.size[p]) * l.stride[p];
      rem /= l.size[p];
    }
    for (int i = 0; i < gsize; ++i) {
      int off = 0;
      rem = i;
      for (int p = 0; p < kNumDims; ++p) {
        if (!mask[p]) continue;
        off += (rem % l.size[p]) * l.stride[p];
        rem /= l.size[p];
      }
      groups[g][i] = base + off;
    }
  }
  return groups;
}

std::array<bool, kNumDims> mask_of(const std::vector<Dim>& order, std::initializer_list<Dim> dims) {
  std::array<bool, kNumDims> m{};
  for (Dim d : dims) m[std::find(order.begin(), order.end(), d) - order.begin()] = true;
  return m;
}

int position(const std::vector<Dim>& order, Dim d) {
  return static_cast<int>(std::find(order.begin(), order.end(), d) - order.begin());
}

}  // namespace

std::string_view dim_name(Dim d) { return kDimNames[static_cast<int>(d)]; }

MeshSpec parse_mesh(std::string_view text) {
  MeshSpec spec;
  std::set<std::string> seen;
  for (std::string_view item : split(text, ",")) {
    item = trim(item);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      throw UsageError(fmt::format("--mesh '{}': '{}' is not DIM=DEGREE (example: tp=2,pp=2,dp=4)",
                                   text, item));
    const std::string key = lower(trim(item.substr(0, eq)));
    const std::string_view val = trim(item.substr(eq + 1));
    int* slot = key == "tp"    ? &spec.tp
                : key == "cp"  ? &spec.cp
                : key == "ep"  ? &spec.ep
                : key == "dp"  ? &spec.dp
                : key == "pp"  ? &spec.pp
                : key == "etp" ? &spec.etp
                : key == "edp" ? &spec.edp
                               : nullptr;
    if (!slot)
      throw UsageError(fmt::format(
          "--mesh '{}': unknown dimension '{}' (known: {})", text, key, fmt::join(kMeshKeys, ", ")));
    if (!seen.insert(key).second)
      throw UsageError(fmt::format("--mesh '{}': dimension {} is given twice", text, key));
    const std::optional<int> v = to_int(val);
    if (!v) throw UsageError(fmt::format("--mesh '{}': degree of {} must be an integer, got '{}'",
                                         text, key, val));
    if (*v < 1)
      throw UsageError(fmt::format("--mesh '{}': degree of {} must be >= 1, got {}", text, key, *v));
    *slot = *v;
  }
  return spec;
}

std::vector<Dim> parse_order(std::string_view text) {
  const std::string t = lower(trim(text));
  if (t.empty()) throw UsageError(fmt::format("--order is empty (default: {})", kDefaultOrder));
  std::vector<Dim> order;
  for (std::string_view tok : split(t, "-")) {
    tok = trim(tok);
    auto it = std::find(kDimNames.begin(), kDimNames.end(), tok);
    if (it == kDimNames.end()) {
      if (tok == "etp" || tok == "edp")
        throw UsageError(fmt::format(
            "--order '{}': unknown dimension '{}': the order names tp cp ep dp pp; the expert "
            "grid puts etp in tp's place and edp in dp's",
            text, tok));
      throw UsageError(fmt::format("--order '{}': unknown dimension '{}' (known: tp, cp, ep, dp, pp)",
                                   text, tok));
    }
    const Dim d = static_cast<Dim>(it - kDimNames.begin());
    if (std::find(order.begin(), order.end(), d) != order.end())
      throw UsageError(fmt::format("--order '{}': dimension {} appears twice", text, tok));
    order.push_back(d);
  }
  // Dims the user left out go last; RankGrid refuses that when their degree is > 1.
  for (int i = 0; i < kNumDims; ++i)
    if (std::find(order.begin(), order.end(), static_cast<Dim>(i)) == order.end())
      order.push_back(static_cast<Dim>(i));
  return order;
}

std::string format_degrees(const Degrees& d) {
  return fmt::format("tp={},cp={},ep={},dp={},pp={},etp={},edp={}", d.tp, d.cp, d.ep, d.dp, d.pp,
                     d.etp, d.edp);
}

const std::vector<GroupKind>& all_group_kinds() {
  static const std::vector<GroupKind> kinds = {
      GroupKind::kWorld, GroupKind::kTp,   GroupKind::kCp,   GroupKind::kDp,
      GroupKind::kPp,    GroupKind::kDpCp, GroupKind::kTpCp, GroupKind::kTpPp,
      GroupKind::kEp,    GroupKind::kEtp,  GroupKind::kEdp,  GroupKind::kEmbedding};
  return kinds;
}

std::string_view group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::kWorld: return "world";
    case GroupKind::kTp: return "tp";
    case GroupKind::kCp: return "cp";
    case GroupKind::kDp: return "dp";
    case GroupKind::kPp: return "pp";
    case GroupKind::kDpCp: return "dp-cp";
    case GroupKind::kTpCp: return "tp-cp";
    case GroupKind::kTpPp: return "tp-pp";
    case GroupKind::kEp: return "ep";
    case GroupKind::kEtp: return "etp";
    case GroupKind::kEdp: return "edp";
    case GroupKind::kEmbedding: return "embedding";
  }
  return "?";
}

GroupKind parse_group_kind(std::string_view name) {
  const std::string n = lower(trim(name));
  for (GroupKind k : all_group_kinds())
    if (n == group_kind_name(k)) return k;
  std::vector<std::string_view> known;
  for (GroupKind k : all_group_kinds()) known.push_back(group_kind_name(k));
  throw UsageError(fmt::format("--group '{}': unknown group kind (known: {})", name, fmt::join(known, ", ")));
}

std::optional<Membership> GroupSet::find(int rank) const {
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].size(); ++i)
      if (groups[g][i] == rank) return Membership{static_cast<int>(g), static_cast<int>(i)};
  return std::nullopt;
}

namespace {

// Degrees the user gave: 0 is "not given", a negative one is refused.
void check_given(const MeshSpec& s) {
  const std::pair<const char*, int> given[] = {{"tp", s.tp}, {"cp", s.cp}, {"ep", s.ep}, {"dp", s.dp},
                                               {"pp", s.pp}, {"etp", s.etp}, {"edp", s.edp}};
  for (auto [name, v] : given)
    if (v < 0) throw UsageError(fmt::format("degree of {} must be >= 1, got {}", name, v));
}

// Dense grid: world = tp*cp*dp*pp; dp as given (checked) or the rest of the world.
int dense_dp(int world, const MeshSpec& s, const Degrees& d, const std::string& head) {
  const int64_t model = int64_t{d.tp} * d.cp * d.pp;
  if (s.dp) {
    const int64_t prod = model * s.dp;
    if (prod != world)
      throw UsageError(fmt::format(
          "{}: tp*cp*dp*pp = {}*{}*{}*{} = {} (rule: tp*cp*dp*pp must equal the world size)", head,
          d.tp, d.cp, s.dp, d.pp, prod));
    return s.dp;
  }
  if (model > world || world % model != 0)
    throw UsageError(fmt::format(
        "{}: tp*cp*pp = {}*{}*{} = {} does not divide the world size (rule: world = tp*cp*dp*pp)",
        head, d.tp, d.cp, d.pp, model));
  return static_cast<int>(world / model);
}

// Expert grid: world = etp*ep*edp*pp; edp as given (checked) or the rest of the world.
int expert_dp(int world, const MeshSpec& s, const Degrees& d, const std::string& head) {
  const int64_t expert_model = int64_t{d.etp} * d.ep * d.pp;
  if (s.edp) {
    const int64_t prod = expert_model * s.edp;
    if (prod != world)
      throw UsageError(fmt::format(
          "{}: etp*ep*edp*pp = {}*{}*{}*{} = {} (rule: etp*ep*edp*pp must equal the world size)",
          head, d.etp, d.ep, s.edp, d.pp, prod));
    return s.edp;
  }
  if (expert_model > world || world % expert_model != 0) {
    if (d.etp == d.tp)
      throw UsageError(fmt::format(
          "{}: ep={} does not divide dp*cp = {}*{} = {} (rule: with etp = tp, experts are spread "
          "over the data- and context-parallel ranks, so ep must divide dp*cp)",
          head, d.ep, d.dp, d.cp, int64_t{d.dp} * d.cp));
    throw UsageError(fmt::format(
        "{}: etp*ep*pp = {}*{}*{} = {} does not divide the world size (rule: world = "
        "etp*ep*edp*pp)",
        head, d.etp, d.ep, d.pp, expert_model));
  }
  return static_cast<int>(world / expert_model);
}

// Every degree, defaults filled in (tp, cp, ep, pp 1; etp tp) and dp, edp derived.
Degrees resolve_degrees(int world, const MeshSpec& s, const std::string& head) {
  Degrees d;
  d.tp = s.tp ? s.tp : 1;
  d.cp = s.cp ? s.cp : 1;
  d.ep = s.ep ? s.ep : 1;
  d.pp = s.pp ? s.pp : 1;
  d.etp = s.etp ? s.etp : d.tp;
  d.dp = dense_dp(world, s, d, head);
  d.edp = expert_dp(world, s, d, head);
  return d;
}

// The order must place every dimension that is not trivial in either grid: the dimensions
// the user typed, not the ones parse_order appended.
void check_order_places(std::string_view order_text, const std::array<int, kNumDims>& dense_size,
                        const std::array<int, kNumDims>& expert_size) {
  std::vector<Dim> typed;
  for (std::string_view tok : split(lower(trim(order_text)), "-"))
    typed.push_back(static_cast<Dim>(std::find(kDimNames.begin(), kDimNames.end(), trim(tok)) - kDimNames.begin()));
  for (int i = 0; i < kNumDims; ++i) {
    const int deg = std::max(dense_size[i], expert_size[i]);
    if (deg > 1 && std::find(typed.begin(), typed.end(), static_cast<Dim>(i)) == typed.end())
      throw UsageError(fmt::format(
          "--order '{}' leaves out {}, whose degree is {} (rule: every dimension of degree > 1 "
          "must appear in the order)",
          order_text, kDimNames[i], deg));
  }
}

// Megatron-LM's rule: unless pp is the slowest non-trivial dimension, the dense and expert
// layers must have the same data-parallel size.
void check_pp_slowest(const std::vector<Dim>& order, const Layout& dense, const Layout& expert, const Degrees& d,
                      std::string_view order_text, const std::string& head) {
  bool pp_slowest = true;
  for (int p = position(order, Dim::kPp) + 1; p < kNumDims; ++p)
    if (dense.size[p] > 1 || expert.size[p] > 1) pp_slowest = false;
  if (d.pp > 1 && !pp_slowest && d.edp != d.dp)
    throw UsageError(fmt::format(
        "{}: with pp not last in --order '{}', the expert grid needs edp == dp, got edp={} dp={} "
        "(rule: etp*ep must equal tp*cp when pp is not the slowest dimension)",
        head, order_text, d.edp, d.dp));
}

// The groups of every kind but the embedding (left empty), indexed by GroupKind.
std::vector<std::vector<RankList>> grid_groups(int world, const std::vector<Dim>& o, const Layout& dense,
                                               const Layout& expert) {
  std::vector<std::vector<RankList>> groups(all_group_kinds().size());
  auto set = [&](GroupKind k, std::vector<RankList> g) { groups[static_cast<int>(k)] = std::move(g); };
  set(GroupKind::kWorld, masked_groups(world, dense, {true, true, true, true, true}));
  set(GroupKind::kTp, masked_groups(world, dense, mask_of(o, {Dim::kTp})));
  set(GroupKind::kCp, masked_groups(world, dense, mask_of(o, {Dim::kCp})));
  set(GroupKind::kDp, masked_groups(world, dense, mask_of(o, {Dim::kDp})));
  set(GroupKind::kPp, masked_groups(world, dense, mask_of(o, {Dim::kPp})));
  set(GroupKind::kDpCp, masked_groups(world, dense, mask_of(o, {Dim::kDp, Dim::kCp})));
  set(GroupKind::kTpCp, masked_groups(world, dense, mask_of(o, {Dim::kTp, Dim::kCp})));
  set(GroupKind::kTpPp, masked_groups(world, dense, mask_of(o, {Dim::kTp, Dim::kPp})));
  set(GroupKind::kEp, masked_groups(world, expert, mask_of(o, {Dim::kEp})));
  set(GroupKind::kEtp, masked_groups(world, expert, mask_of(o, {Dim::kTp})));
  set(GroupKind::kEdp, masked_groups(world, expert, mask_of(o, {Dim::kDp})));
  return groups;
}

// Dense and expert layers must share the pipeline groups.
void check_shared_pp(int world, const std::vector<Dim>& o, const Layout& expert, const std::vector<RankList>& dense_pp,
                     const Degrees& d, std::string_view order_text, const std::string& head) {
  const std::vector<RankList> expert_pp = masked_groups(world, expert, mask_of(o, {Dim::kPp}));
  if (expert_pp != dense_pp)
    throw UsageError(fmt::format(
        "{}: under --order '{}' the expert grid (etp={} ep={} edp={} pp={}) gives other pp groups "
        "than the dense grid (tp={} cp={} dp={} pp={}) (rule: dense and expert layers must share "
        "the pipeline groups; put pp last or make etp*ep place ranks as tp*cp does)",
        head, order_text, d.etp, d.ep, d.edp, d.pp, d.tp, d.cp, d.dp, d.pp));
}

// The first and last stage of each pp group (one rank when the pipeline has one stage).
std::vector<RankList> embedding_groups(const std::vector<RankList>& pp_groups) {
  std::vector<RankList> embedding;
  for (const RankList& pp : pp_groups)
    embedding.push_back(pp.size() == 1 ? RankList{pp.front()} : RankList{pp.front(), pp.back()});
  return embedding;
}

// [kind][rank]: the rank's group and index in each kind; group -1 where it is in none.
std::vector<std::vector<Membership>> index_members(const std::vector<std::vector<RankList>>& groups, int world) {
  std::vector<std::vector<Membership>> member_of(groups.size(), std::vector<Membership>(world));
  for (size_t k = 0; k < groups.size(); ++k)
    for (size_t g = 0; g < groups[k].size(); ++g)
      for (size_t i = 0; i < groups[k][g].size(); ++i)
        member_of[k][groups[k][g][i]] = Membership{static_cast<int>(g), static_cast<int>(i)};
  return member_of;
}

}  // namespace

RankGrid::RankGrid(int world, const MeshSpec& s, std::string_view order_text)
    : world_(world), order_(parse_order(order_text)) {
  if (world < 1) throw UsageError(fmt::format("world size must be >= 1, got {}", world));
  check_given(s);
  const std::string head = fmt::format("impossible mesh for {} ranks", world);
  deg_ = resolve_degrees(world, s, head);
  const Degrees& d = deg_;
  const std::array<int, kNumDims> dense_size = {d.tp, d.cp, 1, d.dp, d.pp};
  const std::array<int, kNumDims> expert_size = {d.etp, 1, d.ep, d.edp, d.pp};
  check_order_places(order_text, dense_size, expert_size);
  const Layout dense = make_layout(order_, dense_size);
  const Layout expert = make_layout(order_, expert_size);
  check_pp_slowest(order_, dense, expert, d, order_text, head);
  groups_ = grid_groups(world, order_, dense, expert);
  check_shared_pp(world, order_, expert, groups(GroupKind::kPp), d, order_text, head);
  groups_[static_cast<int>(GroupKind::kEmbedding)] = embedding_groups(groups(GroupKind::kPp));
  member_of_ = index_members(groups_, world);
}

std::string RankGrid::order_string() const {
  std::vector<std::string_view> names;
  for (Dim d : order_) names.push_back(dim_name(d));
  return fmt::format("{}", fmt::join(names, "-"));
}

Coord RankGrid::coord(int rank) const {
  if (rank < 0 || rank >= world_) throw std::out_of_range(fmt::format("rank {} not in [0, {})", rank, world_));
  const Layout l = make_layout(order_, {deg_.tp, deg_.cp, 1, deg_.dp, deg_.pp});
  auto at = [&](Dim d) { const int p = position(order_, d); return rank / l.stride[p] % l.size[p]; };
  return Coord{at(Dim::kTp), at(Dim::kCp), at(Dim::kDp), at(Dim::kPp)};
}

ExpertCoord RankGrid::expert_coord(int rank) const {
  if (rank < 0 || rank >= world_) throw std::out_of_range(fmt::format("rank {} not in [0, {})", rank, world_));
  const Layout l = make_layout(order_, {deg_.etp, 1, deg_.ep, deg_.edp, deg_.pp});
  auto at = [&](Dim d) { const int p = position(order_, d); return rank / l.stride[p] % l.size[p]; };
  return ExpertCoord{at(Dim::kTp), at(Dim::kEp), at(Dim::kDp), at(Dim::kPp)};
}

int RankGrid::rank_of(const Coord& c) const {
  const Layout l = make_layout(order_, {deg_.tp, deg_.cp, 1, deg_.dp, deg_.pp});
  const std::array<int, kNumDims> by_dim = {c.tp, c.cp, 0, c.dp, c.pp};
  int rank = 0;
  for (int i = 0; i < kNumDims; ++i) {
    const int p = position(order_, static_cast<Dim>(i));
    if (by_dim[i] < 0 || by_dim[i] >= l.size[p])
      throw std::out_of_range(fmt::format("{} coordinate {} not in [0, {})", kDimNames[i], by_dim[i], l.size[p]));
    rank += by_dim[i] * l.stride[p];
  }
  return rank;
}

int RankGrid::rank_of(const ExpertCoord& c) const {
  const Layout l = make_layout(order_, {deg_.etp, 1, deg_.ep, deg_.edp, deg_.pp});
  const std::array<int, kNumDims> by_dim = {c.etp, 0, c.ep, c.edp, c.pp};
  constexpr std::array<std::string_view, kNumDims> names = {"etp", "cp", "ep", "edp", "pp"};
  int rank = 0;
  for (int i = 0; i < kNumDims; ++i) {
    const int p = position(order_, static_cast<Dim>(i));
    if (by_dim[i] < 0 || by_dim[i] >= l.size[p])
      throw std::out_of_range(fmt::format("{} coordinate {} not in [0, {})", names[i], by_dim[i], l.size[p]));
    rank += by_dim[i] * l.stride[p];
  }
  return rank;
}

const std::vector<RankList>& RankGrid::groups(GroupKind k) const { return groups_.at(static_cast<int>(k)); }

int RankGrid::group_size(GroupKind k) const { return static_cast<int>(groups(k).front().size()); }

std::optional<Membership> RankGrid::membership(GroupKind k, int rank) const {
  if (rank < 0 || rank >= world_) return std::nullopt;
  const Membership m = member_of_.at(static_cast<int>(k))[rank];
  if (m.group < 0) return std::nullopt;
  return m;
}

GroupSet parse_groups(std::string_view text, int world, bool require_cover, std::string_view source) {
  if (world < 1) throw UsageError(fmt::format("world size must be >= 1, got {}", world));
  GroupSet set{"custom", {}};
  std::vector<int> line_of(world, 0);  // where each rank was first seen; 0 = not yet
  int lineno = 0;
  for (std::string_view line : split(text, "\n")) {
    ++lineno;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    RankList group;
    for (std::string_view tok : split(line, " ,\t\r")) {
      if (tok.empty()) continue;
      const std::optional<int> r = to_int(tok);
      if (!r)
        throw UsageError(fmt::format("{}:{}: '{}' is not a rank (rule: a line lists integer ranks "
                                     "separated by spaces or commas)", source, lineno, tok));
      if (*r < 0 || *r >= world)
        throw UsageError(fmt::format("{}:{}: rank {} is out of range (rule: ranks lie in [0, {}))",
                                     source, lineno, *r, world));
      if (line_of[*r])
        throw UsageError(fmt::format("{}:{}: rank {} is already in the group on line {} (rule: "
                                     "groups must be disjoint)", source, lineno, *r, line_of[*r]));
      line_of[*r] = lineno;
      group.push_back(*r);
    }
    if (!group.empty()) set.groups.push_back(std::move(group));
  }
  if (set.groups.empty())
    throw UsageError(fmt::format("{}: no groups (rule: one group per line, e.g. '0 1 2 3')", source));
  if (require_cover) {
    std::vector<int> missing;
    for (int r = 0; r < world; ++r)
      if (!line_of[r]) missing.push_back(r);
    if (!missing.empty())
      throw UsageError(fmt::format("{}: {} of {} ranks are in no group, first {} (rule: the groups "
                                   "must cover every rank)", source, missing.size(), world, missing.front()));
  }
  return set;
}

GroupSet read_groups_file(const std::string& path, int world, bool require_cover) {
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("--groups-file '{}': cannot open it", path));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_groups(text.str(), world, require_cover, path);
}

std::string_view span_kind_name(SpanKind k) {
  switch (k) {
    case SpanKind::kIntraNode: return "intra-node";
    case SpanKind::kInterNode: return "inter-node";
    case SpanKind::kMixed: return "mixed";
  }
  return "?";
}

NodeSpan node_span(std::span<const int> ranks, std::span<const int> node_of_rank) {
  std::set<int> nodes;
  for (int r : ranks) nodes.insert(node_of_rank[r]);
  NodeSpan s;
  s.nodes = static_cast<int>(nodes.size());
  s.kind = s.nodes <= 1                  ? SpanKind::kIntraNode
           : s.nodes == int(ranks.size()) ? SpanKind::kInterNode
                                          : SpanKind::kMixed;
  return s;
}

std::vector<int> emulated_node_of_rank(int world, int ranks_per_node) {
  if (ranks_per_node < 1)
    throw UsageError(fmt::format("--ranks-per-node must be >= 1, got {}", ranks_per_node));
  std::vector<int> nodes(world);
  for (int r = 0; r < world; ++r) nodes[r] = r / ranks_per_node;
  return nodes;
}

std::optional<std::string> span_warning(GroupKind k, const std::vector<RankList>& groups,
                                        std::span<const int> node_of_rank) {
  if (k != GroupKind::kTp && k != GroupKind::kEtp) return std::nullopt;
  int worst = 1, crossing = 0;
  for (const RankList& g : groups) {
    const int n = node_span(g, node_of_rank).nodes;
    worst = std::max(worst, n);
    crossing += n > 1;
  }
  if (crossing == 0) return std::nullopt;
  std::map<int, int> per_node;
  for (int n : node_of_rank) ++per_node[n];
  int rpn = 0;
  for (auto [node, count] : per_node) rpn = std::max(rpn, count);
  std::string name = lower(group_kind_name(k));
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return fmt::format("{} group spans {} nodes ({} of {} groups): its traffic leaves the node; keep "
                     "{} <= ranks per node ({}) and {} first in --order",
                     name, worst, crossing, groups.size(), group_kind_name(k), rpn, "tp");
}

}  // namespace meshbench::comm
