// MPI check that MeshComms' communicators hold exactly the ranks RankGrid computes, in
// order, for every group kind, on whatever world it is launched with. Exit 1 on a mismatch.
#include <mpi.h>

#include <cstdio>
#include <optional>
#include <vector>

#include "comm/mesh.hpp"
#include "comm/mesh_comm.hpp"
#include "support/check_help.hpp"

using namespace meshbench::comm;

int main(int argc, char** argv) {
  if (meshbench::tests::answered_help(argc, argv,
                                      "usage: mpiexec -n N build/tests/mesh_comm_check [MESH [ORDER]]\n"
                                      "  checks every mesh sub-communicator against the computed rank lists (default tp=2 tp-cp-ep-dp-pp);\n"
                                      "  a ctest check (mpi.mesh_comm_check_*): exit 0 when all agree, 1 otherwise\n"))
    return 0;
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* mesh = argc > 1 ? argv[1] : "tp=2";
  const char* order = argc > 2 ? argv[2] : "tp-cp-ep-dp-pp";
  int bad = 0, checked = 0;
  std::optional<RankGrid> made;
  try {
    made.emplace(size, parse_mesh(mesh), order);
  } catch (const std::exception& e) {  // a bad MESH or ORDER: one line, exit 2, every rank alike
    if (rank == 0) std::fprintf(stderr, "mesh_comm_check: error: %s\n", e.what());
    MPI_Finalize();
    return 2;
  }
  {
    RankGrid& grid = *made;
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
