#include "groups.hpp"

#include <fmt/core.h>

#include <set>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace meshbench::collectives {

void describe_span(results::GroupInfo& g, const comm::Topology& topo) {
  std::set<int> nodes;
  for (int r : g.ranks) nodes.insert(topo.node_of(r));
  g.nodes_spanned = static_cast<int>(nodes.size());
  if (nodes.size() <= 1) g.span = "intra";
  else if (nodes.size() == g.ranks.size()) g.span = "inter";
  else g.span = "mixed";
}

GroupPlan plan_groups(const Options& opt, MPI_Comm world, comm::Topology& topo) {
  if (opt.ranks_per_node > 0) comm::emulate_nodes(topo, opt.ranks_per_node);
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  GroupPlan plan;
  double t0 = core::now_seconds();
  MB_CHECK_MPI(MPI_Comm_dup(world, &plan.comm), "world");
  double dt = core::now_seconds() - t0;
  MB_CHECK_MPI(MPI_Allreduce(&dt, &plan.setup_seconds, 1, MPI_DOUBLE, MPI_MAX, world), "world");
  plan.group_size = size;
  results::GroupInfo g;
  g.dim = "world";
  for (int r = 0; r < size; ++r) g.ranks.push_back(r);
  describe_span(g, topo);
  plan.groups.push_back(g);
  return plan;
}

void release_groups(GroupPlan& plan) {
  if (plan.comm != MPI_COMM_NULL) MPI_Comm_free(&plan.comm);
}

}  // namespace meshbench::collectives
