#include "comm/mesh_comm.hpp"

#include "core/error.hpp"
#include "core/timer.hpp"

namespace meshbench::comm {

MPI_Comm split_by(MPI_Comm world, int group, int index, double& seconds) {
  MPI_Comm out = MPI_COMM_NULL;
  double t0 = core::now_seconds();
  MB_CHECK_MPI(MPI_Comm_split(world, group < 0 ? MPI_UNDEFINED : group, index, &out), "world");
  double dt = core::now_seconds() - t0;
  MB_CHECK_MPI(MPI_Allreduce(&dt, &seconds, 1, MPI_DOUBLE, MPI_MAX, world), "world");
  return out;
}

MeshComms::~MeshComms() {
  for (auto& [kind, c] : comms_)
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
}

MPI_Comm MeshComms::get(GroupKind kind) {
  auto it = comms_.find(kind);
  if (it != comms_.end()) return it->second;
  int rank = 0;
  MPI_Comm_rank(world_, &rank);
  auto m = grid_.membership(kind, rank);
  double s = 0;
  MPI_Comm c = split_by(world_, m ? m->group : -1, m ? m->index : 0, s);
  if (c != MPI_COMM_NULL) MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  comms_[kind] = c;
  seconds_[kind] = s;
  return c;
}

double MeshComms::setup_seconds(GroupKind kind) const {
  auto it = seconds_.find(kind);
  return it == seconds_.end() ? 0.0 : it->second;
}

}  // namespace meshbench::comm
