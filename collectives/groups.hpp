// Which process groups a collective binary runs in: the world (default), every group of
// one device-mesh dimension at once (--mesh ... --group DIM), or custom groups from
// --groups-file (one group per line; they must cover the world and have equal sizes).
// Each rank joins exactly one group; statistics are then taken over the whole world, so
// the slowest group decides a row.
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
  int my_group = 0;                       // index into `run_groups`
  std::vector<int> members;               // world ranks of this rank's group, in comm order
  std::vector<results::GroupInfo> run_groups;   // the groups the collective runs in
  std::vector<results::GroupInfo> all_groups;   // every group kind of the mesh (for HDF5)
  std::vector<std::string> warnings;      // e.g. "TP group spans 2 nodes ..."
  std::string mesh_json;                  // {"tp":2,...} or empty
  double setup_seconds = 0;               // communicator creation, max over ranks
};

// Collective over `world`. Applies --ranks-per-node to `topo` first. Throws UsageError on
// every rank for an impossible mesh, an unknown dimension or a bad groups file.
GroupPlan plan_groups(const Options& opt, MPI_Comm world, comm::Topology& topo);
void release_groups(GroupPlan& plan);

}  // namespace meshbench::collectives
