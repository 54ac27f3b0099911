#include "comm/topology.hpp"

#include <hwloc.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>

#include "comm/mesh.hpp"
#include "core/error.hpp"

namespace meshbench::comm {
namespace {

// Fixed-size record for MPI_Allgather.
struct Packed {
  std::array<char, 64> host{};
  std::array<char, 64> cores{};
  std::array<char, 32> device{};
  std::array<char, 64> gpus{};
  std::array<char, 64> nics{};
  int local_rank = 0;
  int node = 0;
  int online_cores = 1;
};

template <size_t N>
void put(std::array<char, N>& dst, const std::string& s) {
  std::memcpy(dst.data(), s.data(), std::min(N - 1, s.size()));
}

// The rank's CPU binding, the host's core count, and the GPUs and NICs hwloc sees.
void probe_host(std::string& binding, int& online_cores, std::string& gpus, std::string& nics) {
  hwloc_topology_t topo;
  binding = "?";
  online_cores = 1;
  if (hwloc_topology_init(&topo) != 0) return;
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) == 0) {
    int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    online_cores = std::max(1, std::max(cores, pus));
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0) {
      char* text = nullptr;
      if (hwloc_bitmap_list_asprintf(&text, set) >= 0 && text) {
        binding = text;
        std::free(text);
      }
    }
    hwloc_bitmap_free(set);
    for (hwloc_obj_t o = hwloc_get_next_osdev(topo, nullptr); o; o = hwloc_get_next_osdev(topo, o)) {
      if (!o->name) continue;
      auto t = o->attr->osdev.type;
      std::string& list = (t == HWLOC_OBJ_OSDEV_GPU || t == HWLOC_OBJ_OSDEV_COPROC) ? gpus
                          : (t == HWLOC_OBJ_OSDEV_NETWORK || t == HWLOC_OBJ_OSDEV_OPENFABRICS) ? nics
                                                                                                : binding;
      if (&list == &binding) continue;
      // Two appends, not ("," + name): GCC 12 reports a false -Wrestrict on operator+(const char*, string&&).
      if (!list.empty()) list += ',';
      list += o->name;
    }
  }
  hwloc_topology_destroy(topo);
}

}  // namespace

std::string host_name() {
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  return std::string(name, static_cast<size_t>(len));
}

Topology discover_topology(MPI_Comm comm, const std::string& device) {
  int rank = 0, size = 1;
  MB_CHECK_MPI(MPI_Comm_rank(comm, &rank), "world");
  MB_CHECK_MPI(MPI_Comm_size(comm, &size), "world");

  MPI_Comm local;
  MB_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local), "world");
  int local_rank = 0;
  MB_CHECK_MPI(MPI_Comm_rank(local, &local_rank), "node");
  MPI_Comm_free(&local);

  Packed mine;
  put(mine.host, host_name());
  std::string binding, gpus, nics;
  probe_host(binding, mine.online_cores, gpus, nics);
  put(mine.cores, binding);
  put(mine.gpus, gpus);
  put(mine.nics, nics);
  put(mine.device, device);
  mine.local_rank = local_rank;

  std::vector<Packed> all(static_cast<size_t>(size));
  MB_CHECK_MPI(MPI_Allgather(&mine, sizeof(Packed), MPI_BYTE, all.data(), sizeof(Packed), MPI_BYTE, comm), "world");

  // Node index: the order in which hosts first appear among the ranks.
  Topology topo;
  std::map<std::string, int> node_of_host;
  std::map<int, int> ranks_on_node, cores_on_node;
  for (int r = 0; r < size; ++r) {
    const Packed& p = all[static_cast<size_t>(r)];
    std::string host = p.host.data();
    auto [it, fresh] = node_of_host.try_emplace(host, static_cast<int>(node_of_host.size()));
    RankPlace place{r, host, it->second, p.local_rank, p.cores.data(), p.device.data(), p.gpus.data(),
                    p.nics.data()};
    topo.ranks.push_back(place);
    ++ranks_on_node[it->second];
    cores_on_node[it->second] = p.online_cores;
  }
  topo.nodes = static_cast<int>(node_of_host.size());
  for (auto [node, n] : ranks_on_node) {
    topo.max_ranks_per_node = std::max(topo.max_ranks_per_node, n);
    if (n > cores_on_node[node]) topo.oversubscribed = true;
  }
  topo.cores_per_node = all[0].online_cores;
  return topo;
}

void emulate_nodes(Topology& topo, int ranks_per_node) {
  if (ranks_per_node <= 0) return;
  for (auto& p : topo.ranks) {
    p.node = p.rank / ranks_per_node;
    p.local_rank = p.rank % ranks_per_node;
  }
  int size = static_cast<int>(topo.ranks.size());
  topo.nodes = (size + ranks_per_node - 1) / ranks_per_node;
  topo.max_ranks_per_node = std::min(size, ranks_per_node);
  topo.emulated = true;
}

GroupSpan describe_group(std::string dim, int id, std::vector<int> ranks, const Topology& topo) {
  std::vector<int> node_of(topo.ranks.size());
  for (std::size_t r = 0; r < node_of.size(); ++r) node_of[r] = topo.ranks[r].node;
  const NodeSpan s = node_span(ranks, node_of);
  const char* span = s.kind == SpanKind::kIntraNode   ? "intra"
                     : s.kind == SpanKind::kInterNode ? "inter"
                                                      : "mixed";
  return {std::move(dim), id, std::move(ranks), s.nodes, span};
}

}  // namespace meshbench::comm
