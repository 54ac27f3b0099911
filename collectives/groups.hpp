// Which process groups a collective binary runs in: the world (default), every group of
// one device-mesh dimension at once (--mesh ... --group DIM), or custom groups from
// --groups-file. Each rank joins exactly one group; ranks outside every custom group sit
// the run out in a group of their own.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "comm/topology.hpp"
#include "options.hpp"
#include "results/record.hpp"

namespace meshbench::collectives {

struct GroupPlan {
  MPI_Comm comm = MPI_COMM_NULL;          // this rank's group (owned; see release_groups)
  std::string dim = "world";
  int group_size = 1;
  std::vector<results::GroupInfo> groups; // every group of the run, for reports
  std::string mesh_json;                  // {"tp":2,...} or empty
  double setup_seconds = 0;               // time to create the communicators (max over ranks)
};

// Collective over `world`. Applies --ranks-per-node to `topo` first.
GroupPlan plan_groups(const Options& opt, MPI_Comm world, comm::Topology& topo);
void release_groups(GroupPlan& plan);

// nodes spanned and intra|inter|mixed for a list of world ranks.
void describe_span(results::GroupInfo& g, const comm::Topology& topo);

}  // namespace meshbench::collectives
