// MPI check that MeshComms' communicators hold exactly the ranks RankGrid computes, in
// order, for every group kind, on whatever world it is launched with. Exit 1 on a mismatch.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "comm/mesh.hpp"
#include "comm/mesh_comm.hpp"

using namespace meshbench::comm;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* mesh = argc > 1 ? argv[1] : "tp=2";
  const char* order = argc > 2 ? argv[2] : "tp-cp-ep-dp-pp";
  int bad = 0, checked = 0;
  {
    RankGrid grid(size, parse_mesh(mesh), order);
    MeshComms comms(MPI_COMM_WORLD, grid);
    MPI_Group world_group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    for (GroupKind k : all_group_kinds()) {
      MPI_Comm c = comms.get(k);
      auto m = grid.membership(k, rank);
      if (!m) {
        if (c != MPI_COMM_NULL) ++bad;
        continue;
      }
      const RankList& want = grid.groups(k)[static_cast<size_t>(m->group)];
      int n = 0;
      MPI_Comm_size(c, &n);
      std::vector<int> local(static_cast<size_t>(n)), global(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) local[static_cast<size_t>(i)] = i;
      MPI_Group g;
      MPI_Comm_group(c, &g);
      MPI_Group_translate_ranks(g, n, local.data(), world_group, global.data());
      MPI_Group_free(&g);
      ++checked;
      if (global != want) {
        ++bad;
        std::fprintf(stderr, "rank %d: group %s: communicator ranks differ from the grid\n", rank,
                     std::string(group_kind_name(k)).c_str());
      }
    }
    MPI_Group_free(&world_group);
  }
  int total_bad = 0, total_checked = 0;
  MPI_Allreduce(&bad, &total_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&checked, &total_checked, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("mesh %s order %s: %d communicators checked, %d mismatches\n", mesh, order, total_checked, total_bad);
  MPI_Finalize();
  return total_bad == 0 && total_checked > 0 ? 0 : 1;
}
