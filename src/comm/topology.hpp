// Where each rank runs: host, node index, local rank, core binding (hwloc) and device.
// Discovered collectively on a communicator (normally MPI_COMM_WORLD) so every rank holds
// the same table. `--ranks-per-node N` replaces the node assignment with rank / N to
// emulate N-rank nodes on one machine; such a topology is labelled emulated.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace meshbench::comm {

struct RankPlace {
  int rank = 0;
  std::string host;
  int node = 0;
  int local_rank = 0;
  std::string cores;   // hwloc cpuset list of the rank's binding, e.g. "0-1"
  std::string device;  // "cpu" or "cuda:<index>"
  std::string gpus;    // GPUs hwloc sees on the host ("cuda0,cuda1" / "nvidia0"), "" if none
  std::string nics;    // network and RDMA devices hwloc sees ("eth0,mlx5_0"), "" if none
};

struct Topology {
  std::vector<RankPlace> ranks;  // indexed by world rank
  int nodes = 1;
  int max_ranks_per_node = 1;
  int cores_per_node = 1;      // online cores of rank 0's host
  bool oversubscribed = false; // some host runs more ranks than it has cores
  bool emulated = false;       // node assignment from --ranks-per-node

  int node_of(int rank) const { return ranks[static_cast<size_t>(rank)].node; }
};

// Collective over `comm`. `device` is this rank's device label ("cpu", "cuda:0").
Topology discover_topology(MPI_Comm comm, const std::string& device);

// Re-assign nodes as rank / ranks_per_node (for testing multi-node layouts on one host).
void emulate_nodes(Topology& topo, int ranks_per_node);

// This process's host name (MPI_Get_processor_name).
std::string host_name();

// A process group of the run with the nodes its members span: the finished, plain record that
// results/ writes to topology/groups (results::GroupInfo is this type).
struct GroupSpan {
  std::string dim;          // "world", "tp", "dp", "custom", ...
  int id = 0;
  std::vector<int> ranks;   // world ranks
  int nodes_spanned = 1;
  std::string span;         // intra | inter | mixed
};

// Group `id` of dimension `dim` with its member ranks, and the nodes they span in `topo`.
GroupSpan describe_group(std::string dim, int id, std::vector<int> ranks, const Topology& topo);

}  // namespace meshbench::comm
