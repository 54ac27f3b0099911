// mesh_info: prints the rank grid for a world size, mesh degrees and order: each rank's
// coordinates, every group kind's rank lists with the nodes they span, and warnings such as
// "TP group spans 2 nodes". A planning tool: it creates no communicators and moves no data.
//
//   mesh_info --world 16 --mesh tp=2,pp=2,dp=4 [--ranks-per-node 8] [--json]   (no MPI)
//   mpirun -n 16 mesh_info --mesh tp=2,pp=2                 (nodes from the hosts, rank 0 prints)
//   mesh_info --list-json   (the suite's names for scripts: collectives, binaries, mesh keys,
//                            order dimensions, group kinds; one JSON line, no MPI)
//
// With --world, MPI is never initialised, so it runs on a login node. Exit 2 on bad usage or
// an impossible mesh, with one message naming the rule (printed once under mpirun).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <mpi.h>

#include <cstdio>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/mesh.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "spec.hpp"

namespace {

using namespace meshbench;
using comm::GroupKind;

struct Args {
  int world = 0;  // given: lay out without MPI; else the MPI world size
  std::string mesh;
  std::string order{comm::kDefaultOrder};
  int ranks_per_node = 0;  // not given: real nodes under MPI, unknown with --world
  bool json = false;
  bool list_json = false;
  bool world_given = false, rpn_given = false;  // on the command line or in the environment
};

enum class NodeSource { kUnknown, kEmulated, kHosts };

// Node index of every rank from the hosts: ranks sharing memory form a node, numbered by their
// lowest rank's order. Collective over MPI_COMM_WORLD.
std::vector<int> nodes_from_hosts(int world) {
  MPI_Comm local, leaders;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int local_rank = 0, node = 0;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_split(MPI_COMM_WORLD, local_rank == 0 ? 0 : MPI_UNDEFINED, 0, &leaders);
  if (leaders != MPI_COMM_NULL) {
    MPI_Comm_rank(leaders, &node);
    MPI_Comm_free(&leaders);
  }
  MPI_Bcast(&node, 1, MPI_INT, 0, local);
  MPI_Comm_free(&local);
  std::vector<int> nodes(static_cast<size_t>(world));
  MPI_Allgather(&node, 1, MPI_INT, nodes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  return nodes;
}

std::string span_text(const comm::RankList& g, const std::vector<int>& nodes) {
  if (nodes.empty()) return "";
  const comm::NodeSpan s = comm::node_span(g, nodes);
  return fmt::format("  {} node{}, {}", s.nodes, s.nodes == 1 ? "" : "s", comm::span_kind_name(s.kind));
}

std::string render_text(const comm::RankGrid& grid, const std::vector<int>& nodes, NodeSource src,
                        int rpn, const std::vector<std::string>& warnings) {
  const comm::Degrees& d = grid.degrees();
  std::string out;
  auto o = std::back_inserter(out);
  fmt::format_to(o, "mesh_info: {} ranks, order {} (leftmost varies fastest)\n", grid.world(),
                 grid.order_string());
  fmt::format_to(o, "dense grid:  tp={} cp={} dp={} pp={}\n", d.tp, d.cp, d.dp, d.pp);
  fmt::format_to(o, "expert grid: etp={} ep={} edp={} pp={}\n", d.etp, d.ep, d.edp, d.pp);
  int n_nodes = 0;
  for (int n : nodes) n_nodes = std::max(n_nodes, n + 1);
  if (src == NodeSource::kUnknown)
    fmt::format_to(o, "nodes: unknown (run under mpirun, or pass --ranks-per-node N to emulate N-rank nodes)\n");
  else if (src == NodeSource::kEmulated)
    fmt::format_to(o, "nodes: {}, emulated with {} ranks per node\n", n_nodes, rpn);
  else
    fmt::format_to(o, "nodes: {}, from the hosts\n", n_nodes);

  fmt::format_to(o, "\n{:>5} {:>5} {:>4} {:>4} {:>4} {:>4} {:>4} {:>4} {:>4}\n", "rank", "node", "tp", "cp",
                 "ep", "dp", "pp", "etp", "edp");
  for (int r = 0; r < grid.world(); ++r) {
    const comm::Coord c = grid.coord(r);
    const comm::ExpertCoord e = grid.expert_coord(r);
    const std::string node = nodes.empty() ? "-" : std::to_string(nodes[static_cast<size_t>(r)]);
    fmt::format_to(o, "{:>5} {:>5} {:>4} {:>4} {:>4} {:>4} {:>4} {:>4} {:>4}\n", r, node, c.tp, c.cp, e.ep,
                   c.dp, c.pp, e.etp, e.edp);
  }

  for (GroupKind k : comm::all_group_kinds()) {
    const auto& groups = grid.groups(k);
    const int size = grid.group_size(k);
    fmt::format_to(o, "\n{}: {} group{} of {}", comm::group_kind_name(k), groups.size(),
                   groups.size() == 1 ? "" : "s", size);
    if (k == GroupKind::kEmbedding) fmt::format_to(o, " (first and last stage of each pp group)");
    if (size == 1) {
      fmt::format_to(o, " (every rank alone)\n");
      continue;
    }
    fmt::format_to(o, "\n");
    for (size_t g = 0; g < groups.size(); ++g)
      fmt::format_to(o, "  {:>4}  [{}]{}\n", g, fmt::join(groups[g], ", "), span_text(groups[g], nodes));
  }
  if (!warnings.empty()) fmt::format_to(o, "\n");
  for (const std::string& w : warnings) fmt::format_to(o, "warning: {}\n", w);
  return out;
}

std::string render_json(const comm::RankGrid& grid, const std::vector<int>& nodes, NodeSource src,
                        int rpn, const std::vector<std::string>& warnings) {
  using json = nlohmann::ordered_json;
  const comm::Degrees& d = grid.degrees();
  json j;
  j["world"] = grid.world();
  j["order"] = grid.order_string();
  j["degrees"] = {{"tp", d.tp}, {"cp", d.cp}, {"ep", d.ep}, {"dp", d.dp},
                  {"pp", d.pp}, {"etp", d.etp}, {"edp", d.edp}};
  j["nodes"] = {{"source", src == NodeSource::kUnknown ? "unknown" : src == NodeSource::kEmulated ? "emulated" : "hosts"}};
  if (src == NodeSource::kEmulated) j["nodes"]["ranks_per_node"] = rpn;
  json ranks = json::array();
  for (int r = 0; r < grid.world(); ++r) {
    const comm::Coord c = grid.coord(r);
    const comm::ExpertCoord e = grid.expert_coord(r);
    json row = {{"rank", r}, {"tp", c.tp}, {"cp", c.cp}, {"ep", e.ep}, {"dp", c.dp},
                {"pp", c.pp}, {"etp", e.etp}, {"edp", e.edp}};
    row["node"] = nodes.empty() ? json(nullptr) : json(nodes[static_cast<size_t>(r)]);
    ranks.push_back(row);
  }
  j["ranks"] = ranks;
  json groups = json::object();
  for (GroupKind k : comm::all_group_kinds()) {
    json list = json::array();
    const auto& gs = grid.groups(k);
    for (size_t g = 0; g < gs.size(); ++g) {
      json entry = {{"id", g}, {"ranks", gs[g]}};
      if (!nodes.empty()) {
        const comm::NodeSpan s = comm::node_span(gs[g], nodes);
        entry["nodes"] = s.nodes;
        entry["span"] = comm::span_kind_name(s.kind);
      }
      list.push_back(entry);
    }
    groups[std::string(comm::group_kind_name(k))] = list;
  }
  j["groups"] = groups;
  j["warnings"] = warnings;
  return j.dump() + "\n";  // one line: for jq and scripts
}

// The names scripts would otherwise copy from the C++ (scripts/meshbench/names.py reads them):
// the collectives with a plug-in, every binary, the --mesh keys, the --order dimensions and the
// --group kinds. step_bench is listed even when the engine is not built (sweep checks the file).
std::string render_names() {
  using json = nlohmann::ordered_json;
  json colls = json::array(), bins = json::array(), keys = json::array(), dims = json::array(),
       kinds = json::array();
  for (const collectives::Spec* s : collectives::all_specs()) {
    colls.push_back(std::string(comm::name(s->kind)));
    bins.push_back(std::string(comm::name(s->kind)) + "_bench");
  }
  bins.push_back("step_bench");
  bins.push_back("mesh_info");
  for (std::string_view k : comm::kMeshKeys) keys.push_back(std::string(k));
  for (comm::Dim d : {comm::Dim::kTp, comm::Dim::kCp, comm::Dim::kEp, comm::Dim::kDp, comm::Dim::kPp})
    dims.push_back(std::string(comm::dim_name(d)));
  for (GroupKind k : comm::all_group_kinds()) kinds.push_back(std::string(comm::group_kind_name(k)));
  json j{{"collectives", colls}, {"binaries", bins}, {"mesh_dims", keys}, {"order_dims", dims},
         {"group_kinds", kinds}};
  return j.dump() + "\n";
}

// Parses argv into `a`. Returns the exit code when there is nothing more to do (--help, or
// bad usage, said on stderr).
std::optional<int> parse_args(int argc, char** argv, Args& a) {
  CLI::App app{"mesh_info: the rank grid of a device mesh: every rank's (tp, cp, ep, dp, pp) "
               "coordinates and each group's ranks and node span. Every option can also be set as "
               "MESHBENCH_<OPTION>, e.g. MESHBENCH_MESH=tp=2,pp=2.",
               "mesh_info"};
  using meshbench::core::with_env;
  CLI::Option* world_opt =
      with_env(app.add_option("--world", a.world, "world size to lay out without MPI (default: the mpirun size)"));
  with_env(app.add_option("--mesh", a.mesh,
                          "degrees, e.g. tp=2,pp=2,dp=4 (keys tp cp ep dp pp etp edp; dp, edp derived)"));
  with_env(app.add_option("--order", a.order, "mesh order, leftmost varies fastest"))->capture_default_str();
  CLI::Option* rpn_opt =
      with_env(app.add_option("--ranks-per-node", a.ranks_per_node, "emulate nodes of N ranks (node = rank / N)"));
  with_env(app.add_flag("--json", a.json, "print JSON instead of the table"));
  app.add_flag("--list-json", a.list_json,
               "print the suite's names (collectives, binaries, mesh keys, order dims, group kinds) as "
               "one JSON line and exit; no MPI");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "mesh_info: error: %s\n", core::parse_message(app, e).c_str());
    return static_cast<int>(core::ExitCode::kUsage);
  }
  for (auto [opt, value] : {std::pair{world_opt, a.world}, std::pair{rpn_opt, a.ranks_per_node}})
    if (opt->count() > 0 && value < 1) {
      std::fprintf(stderr, "mesh_info: error: %s must be >= 1, got %d\n", opt->get_name().c_str(), value);
      return static_cast<int>(core::ExitCode::kUsage);
    }
  a.world_given = world_opt->count() > 0;
  a.rpn_given = rpn_opt->count() > 0;
  return std::nullopt;
}

// Lays out the grid and prints it on rank 0 (warnings also on stderr with --json). Throws
// core::UsageError for an impossible mesh, before any collective, so every rank refuses alike.
void show_grid(const Args& a, int rank, int world, bool use_mpi) {
  const comm::RankGrid grid(world, comm::parse_mesh(a.mesh), a.order);
  NodeSource src = NodeSource::kUnknown;
  std::vector<int> nodes;
  if (a.rpn_given) {
    nodes = comm::emulated_node_of_rank(world, a.ranks_per_node);
    src = NodeSource::kEmulated;
  } else if (use_mpi) {
    nodes = nodes_from_hosts(world);
    src = NodeSource::kHosts;
  }
  std::vector<std::string> warnings;
  if (!nodes.empty())
    for (GroupKind k : comm::all_group_kinds())
      if (auto w = comm::span_warning(k, grid.groups(k), nodes)) warnings.push_back(*w);
  if (rank != 0) return;
  const std::string text = a.json ? render_json(grid, nodes, src, a.ranks_per_node, warnings)
                                  : render_text(grid, nodes, src, a.ranks_per_node, warnings);
  std::fputs(text.c_str(), stdout);
  for (const std::string& w : warnings)
    if (a.json) std::fprintf(stderr, "mesh_info: warning: %s\n", w.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (std::optional<int> rc = parse_args(argc, argv, a)) return *rc;
  if (a.list_json) {
    std::fputs(render_names().c_str(), stdout);
    return 0;
  }
  const bool use_mpi = !a.world_given;
  int rank = 0, world = a.world;
  if (use_mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
  }
  int rc = 0;
  try {
    show_grid(a, rank, world, use_mpi);
  } catch (const core::UsageError& e) {
    if (rank == 0) std::fprintf(stderr, "mesh_info: error: %s\n", e.what());
    rc = static_cast<int>(core::ExitCode::kUsage);
  }
  std::fflush(stdout);
  if (use_mpi) MPI_Finalize();
  return rc;
}
