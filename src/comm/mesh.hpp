// The device mesh: which rank holds which coordinate, and the rank lists of every process group
// that training uses. Pure integer code (no MPI): the communicators are built from these lists.
// Not here: creating communicators, detecting hosts (see the topology and communicator code).
//
// Reference: Megatron-LM's RankGenerator / generate_masked_orthogonal_rank_groups. The ranks
// are laid out along the dimensions of an order string, the leftmost varying fastest:
// with order tp-cp-ep-dp-pp, rank = tp + TP*(cp + CP*(dp + DP*pp)). Two grids share the world:
//   dense grid  (tp, cp, ep=1, dp, pp)        attention/dense weights; dp = world/(tp*cp*pp)
//   expert grid (etp, cp=1, ep, edp, pp)      MoE experts; etp takes tp's place in the order,
//                                             edp takes dp's; edp = world/(etp*ep*pp)
// and both must give the same pp groups. A group of kind "dp-cp" holds the ranks that differ
// only in their dp and cp coordinates; its members are listed with the leftmost dimension of
// the order varying fastest, and groups are numbered the same way over the other dimensions.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshbench::comm {

// Dimensions that may appear in an order string.
enum class Dim { kTp, kCp, kEp, kDp, kPp };
inline constexpr int kNumDims = 5;
inline constexpr std::string_view kDefaultOrder = "tp-cp-ep-dp-pp";
std::string_view dim_name(Dim d);

// What the user typed in --mesh "tp=2,pp=2,dp=4"; 0 means "not given" (tp, cp, ep, pp default
// to 1, etp to tp, dp and edp are derived from the world size).
struct MeshSpec {
  int tp = 0, cp = 0, ep = 0, dp = 0, pp = 0, etp = 0, edp = 0;
};

// The keys --mesh accepts, in MeshSpec's order (mesh_info --list-json prints them for scripts).
inline constexpr std::array<std::string_view, 7> kMeshKeys = {"tp", "cp", "ep", "dp", "pp", "etp", "edp"};

// Parses "tp=2,pp=2,dp=4" (keys tp cp ep dp pp etp edp; "" gives all defaults).
// Throws core::UsageError naming the bad key or value.
MeshSpec parse_mesh(std::string_view text);

// Parses an order string such as "tp-cp-ep-pp-dp": a permutation of some of tp cp ep dp pp.
// Dims left out are appended at the slowest end (allowed only if their degree is 1, which
// RankGrid checks). Throws core::UsageError on an unknown or repeated dimension.
std::vector<Dim> parse_order(std::string_view text);

// Resolved degrees, every one >= 1. tp*cp*dp*pp == etp*ep*edp*pp == world.
struct Degrees {
  int tp = 1, cp = 1, ep = 1, dp = 1, pp = 1, etp = 1, edp = 1;
};
// "tp=2,cp=1,ep=1,dp=4,pp=2,etp=2,edp=4": the canonical form, also for HDF5 attributes.
std::string format_degrees(const Degrees& d);

// A rank's place in each grid.
struct Coord {  // dense grid
  int tp = 0, cp = 0, dp = 0, pp = 0;
};
struct ExpertCoord {  // expert grid
  int etp = 0, ep = 0, edp = 0, pp = 0;
};

// The group kinds of training, named as on the command line (--group).
enum class GroupKind {
  kWorld,      // every rank
  kTp,         // tensor parallel
  kCp,         // context parallel
  kDp,         // data parallel (dense weights when cp == 1)
  kPp,         // pipeline stages of one model replica
  kDpCp,       // dense-weight gradient group: dp x cp
  kTpCp,       // tp x cp
  kTpPp,       // model parallel: tp x pp
  kEp,         // expert parallel (all-to-all of tokens)
  kEtp,        // expert tensor parallel
  kEdp,        // expert data parallel (expert-weight gradient group)
  kEmbedding,  // first and last stage of each pp group (tied embeddings); not a partition
};
const std::vector<GroupKind>& all_group_kinds();  // in the order above
std::string_view group_kind_name(GroupKind k);    // "world", "tp", ..., "dp-cp", "embedding"
GroupKind parse_group_kind(std::string_view name);  // throws core::UsageError listing choices

using RankList = std::vector<int>;

// Where a rank sits in a set of groups: the group's id and the rank's position in it
// (for MPI_Comm_split: color = group, key = index).
struct Membership {
  int group = -1;
  int index = -1;
};

// A named list of groups: one kind of a RankGrid, or the groups of a --groups-file.
struct GroupSet {
  std::string name;             // "tp", "dp-cp", ... or "custom"
  std::vector<RankList> groups;  // group id -> member ranks, in communicator order
  // nullopt when the rank is in no group (middle pipeline stages for "embedding", ranks a
  // groups file leaves out).
  std::optional<Membership> find(int rank) const;
};

class RankGrid {
 public:
  // Throws core::UsageError (exit 2) naming the rule broken: world < 1, a degree < 1, a product
  // that does not divide the world, a given dp/edp that disagrees, a dim of degree > 1 that the
  // order leaves out, expert pp groups that differ from the dense ones.
  RankGrid(int world, const MeshSpec& spec, std::string_view order = kDefaultOrder);

  int world() const { return world_; }
  const Degrees& degrees() const { return deg_; }
  const std::vector<Dim>& order() const { return order_; }  // all five dims, fastest first
  std::string order_string() const;                          // "tp-cp-ep-dp-pp"

  Coord coord(int rank) const;
  ExpertCoord expert_coord(int rank) const;
  int rank_of(const Coord& c) const;  // throws std::out_of_range on a bad coordinate
  int rank_of(const ExpertCoord& c) const;

  // The groups of one kind, numbered as Megatron-LM numbers them. Sizes: groups(k).size() *
  // group_size(k) == world for every kind but kEmbedding.
  const std::vector<RankList>& groups(GroupKind k) const;
  int group_size(GroupKind k) const;
  std::optional<Membership> membership(GroupKind k, int rank) const;

 private:
  int world_;
  Degrees deg_;
  std::vector<Dim> order_;
  std::vector<std::vector<RankList>> groups_;       // indexed by GroupKind
  std::vector<std::vector<Membership>> member_of_;  // [kind][rank]; group -1 = none
};

// --groups-file: one group per line, ranks separated by spaces or commas, '#' starts a comment,
// blank lines ignored. Checks: ranks are integers in [0, world), no rank appears twice (the
// groups are disjoint), at least one group, and with require_cover every rank is in a group.
// `source` names the input in messages ("rails.txt:3: rank 17 is out of range ...").
GroupSet parse_groups(std::string_view text, int world, bool require_cover,
                      std::string_view source = "groups file");
GroupSet read_groups_file(const std::string& path, int world, bool require_cover);

// Node spans. node_of_rank[r] is the node index of rank r (0-based, from the hosts, or emulated).
enum class SpanKind {
  kIntraNode,  // every member on one node (also any group of one rank)
  kInterNode,  // every member on a different node
  kMixed,      // several nodes, some holding more than one member
};
std::string_view span_kind_name(SpanKind k);  // "intra-node", "inter-node", "mixed"
struct NodeSpan {
  int nodes = 1;  // distinct nodes the group touches
  SpanKind kind = SpanKind::kIntraNode;
};
NodeSpan node_span(std::span<const int> ranks, std::span<const int> node_of_rank);

// --ranks-per-node N on one machine: node = rank / N (the last node may hold fewer).
std::vector<int> emulated_node_of_rank(int world, int ranks_per_node);

// A line such as "TP group spans 2 nodes (8 of 8 groups); tensor parallelism wants a node's
// fast links: order tp first or use tp <= 4 ranks per node", for kinds whose traffic should
// stay inside a node (tp, etp) when any of their groups crosses one; nullopt otherwise.
std::optional<std::string> span_warning(GroupKind k, const std::vector<RankList>& groups,
                                        std::span<const int> node_of_rank);

}  // namespace meshbench::comm
