// MPI communicators for the groups of a RankGrid, created on request with MPI_Comm_split
// (color = group id, key = position in the group, so communicator rank i is list member i)
// and kept until destruction. The time each split took (max over ranks) is recorded,
// because communicator creation grows with scale. Collective: every rank must request the
// same kinds in the same order.
#pragma once

#include <mpi.h>

#include <map>

#include "comm/mesh.hpp"

namespace meshbench::comm {

class MeshComms {
 public:
  MeshComms(MPI_Comm world, const RankGrid& grid) : world_(world), grid_(grid) {}
  ~MeshComms();
  MeshComms(const MeshComms&) = delete;
  MeshComms& operator=(const MeshComms&) = delete;

  // This rank's communicator for `kind` (MPI_COMM_NULL when the rank is in no such group,
  // as middle pipeline stages for kEmbedding).
  MPI_Comm get(GroupKind kind);
  double setup_seconds(GroupKind kind) const;  // 0 if not created yet
  const RankGrid& grid() const { return grid_; }

 private:
  MPI_Comm world_;
  const RankGrid& grid_;
  std::map<GroupKind, MPI_Comm> comms_;
  std::map<GroupKind, double> seconds_;
};

// Splits `world` by an explicit membership (color = group, key = index; group -1 sits out).
// Returns the new communicator and the split time (max over ranks) in `seconds`.
MPI_Comm split_by(MPI_Comm world, int group, int index, double& seconds);

}  // namespace meshbench::comm
