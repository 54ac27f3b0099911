#include "groups.hpp"

#include <fmt/core.h>

#include <optional>

#include "comm/agree.hpp"
#include "comm/mesh.hpp"
#include "comm/mesh_comm.hpp"
#include "core/error.hpp"

namespace meshbench::collectives {
namespace {

using core::UsageError;

std::vector<results::GroupInfo> describe(const std::string& dim, const std::vector<comm::RankList>& lists,
                                         const comm::Topology& topo) {
  std::vector<results::GroupInfo> out;
  for (std::size_t g = 0; g < lists.size(); ++g)
    out.push_back(comm::describe_group(dim, static_cast<int>(g), lists[g], topo));
  return out;
}

}  // namespace

GroupPlan plan_groups(const Options& opt, MPI_Comm world, comm::Topology& topo) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  if (opt.ranks_per_node > 0) comm::emulate_nodes(topo, opt.ranks_per_node);
  std::vector<int> node_of(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) node_of[static_cast<std::size_t>(r)] = topo.node_of(r);

  GroupPlan plan;
  std::vector<comm::RankList> lists;
  std::optional<comm::RankGrid> grid;
  comm::agreed(world, [&] {
    if (!opt.groups_file.empty()) {
      comm::GroupSet gs = comm::read_groups_file(opt.groups_file, size, /*require_cover=*/true);
      for (const auto& g : gs.groups)
        if (g.size() != gs.groups.front().size())
          throw UsageError(fmt::format("--groups-file {}: groups must have equal sizes (the first has {} ranks, "
                                       "another {})", opt.groups_file, gs.groups.front().size(), g.size()));
      plan.dim = "custom";
      lists = gs.groups;
      return;
    }
    if (opt.mesh.empty()) {
      if (opt.group != "world")
        throw UsageError(fmt::format("--group {}: a group dimension needs --mesh (e.g. --mesh tp=2,dp=2)", opt.group));
      plan.dim = "world";
      comm::RankList all;
      for (int r = 0; r < size; ++r) all.push_back(r);
      lists = {all};
      return;
    }
    grid.emplace(size, comm::parse_mesh(opt.mesh), opt.order);
    comm::GroupKind kind = comm::parse_group_kind(opt.group);
    if (kind == comm::GroupKind::kEmbedding)
      throw UsageError("--group embedding: not every rank is in an embedding group; choose a dimension that "
                       "partitions the world");
    plan.dim = std::string(comm::group_kind_name(kind));
    lists = grid->groups(kind);
  });

  // This rank's group and its position in it.
  for (std::size_t g = 0; g < lists.size(); ++g)
    for (std::size_t i = 0; i < lists[g].size(); ++i)
      if (lists[g][i] == rank) {
        plan.my_group = static_cast<int>(g);
        plan.members = lists[g];
        plan.comm = comm::split_by(world, static_cast<int>(g), static_cast<int>(i), plan.setup_seconds);
      }
  MPI_Comm_set_errhandler(plan.comm, MPI_ERRORS_RETURN);
  plan.group_size = static_cast<int>(plan.members.size());
  plan.run_groups = describe(plan.dim, lists, topo);

  if (grid) {
    const comm::Degrees& d = grid->degrees();
    plan.mesh_json = fmt::format(R"({{"tp":{},"cp":{},"ep":{},"dp":{},"pp":{},"etp":{},"edp":{}}})", d.tp, d.cp,
                                 d.ep, d.dp, d.pp, d.etp, d.edp);
    for (comm::GroupKind k : comm::all_group_kinds()) {
      auto rows = describe(std::string(comm::group_kind_name(k)), grid->groups(k), topo);
      plan.all_groups.insert(plan.all_groups.end(), rows.begin(), rows.end());
      if (auto w = comm::span_warning(k, grid->groups(k), node_of)) plan.warnings.push_back(*w);
    }
  } else {
    plan.all_groups = plan.run_groups;
  }
  return plan;
}

void release_groups(GroupPlan& plan) {
  if (plan.comm != MPI_COMM_NULL) MPI_Comm_free(&plan.comm);
}

}  // namespace meshbench::collectives
