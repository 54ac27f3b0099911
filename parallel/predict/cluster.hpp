// A cluster described, not measured (issue 27; docs/predict.md "A cluster this machine is
// not"): the GPU's datasheet peaks and memory, the GPUs per node, the intra-node link, the
// inter-node network and the collective algorithms, from a TOML file (examples/clusters/).
// The step model times a plan on it with costs.hpp's ClusterCosts: a GEMM by the larger of its
// FLOPs over peak x efficiency (by size with gemm_by_gflop) and its bytes over HBM bandwidth,
// attention by FLOPs, the elementwise ops by bytes, the collectives by ring (or tree) formulas
// over the links each group spans.
// Not here: the step model (predict.hpp), the per-item costs (costs.hpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace meshbench::parallel {

struct Link {
  double bytes_per_s = 0;  // per GPU and direction
  double latency_s = 0;    // per message hop
};

struct Cluster {
  std::string path, name;
  struct {
    std::string name;
    double peak_bf16_flops = 0, peak_fp32_flops = 0;  // dense, datasheet, FLOP/s
    double hbm_bytes = 0, hbm_bytes_per_s = 0;
  } gpu;
  int gpus_per_node = 0;
  Link intra;              // NVLink / NVSwitch
  Link inter;              // the NIC of each GPU (rail-optimised: one NIC per GPU)
  bool has_inter = false;  // [inter] given: groups may span nodes
  int rails = 0;
  double oversubscription = 1;  // the inter-node bandwidth divides by it
  std::string algorithm = "ring";  // all-reduce inside a level: ring | tree
  bool hierarchical = true;        // a group across nodes: intra-node, then inter-node, then intra
  // Fractions of peak each op class reaches (GEMM and attention of the bf16 peak, the
  // elementwise ops of the HBM bandwidth), and where the values come from.
  double eff_gemm = 0, eff_attention = 0, eff_memory = 0;
  // Optional GEMM efficiency by size ([efficiency] gemm_by_gflop = [[GFLOP, fraction], ...]):
  // a GEMM of F GFLOP takes the fraction of the largest threshold <= F (below every threshold:
  // the smallest's); empty: eff_gemm for every size.
  std::vector<std::pair<double, double>> gemm_by_gflop;
  double gemm_efficiency(double flops) const;
  std::string efficiency_source;
};

// Reads and checks a cluster file. Throws core::UsageError naming the file and the field
// ("--predict examples/clusters/x.toml: [gpu] peak_bf16_tflops is missing") for a missing,
// malformed or out-of-range field, or a file that is not TOML.
Cluster read_cluster(const std::string& path);

// True when `path` names a cluster description (it ends in .toml), not a calibration file.
bool is_cluster_file(const std::string& path);

}  // namespace meshbench::parallel
