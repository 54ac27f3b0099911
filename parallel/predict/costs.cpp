#include "predict/costs.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/core.h>

#include "comm/communicator.hpp"
#include "comm/mesh.hpp"
#include "core/error.hpp"

namespace meshbench::parallel {

using core::UsageError;

// ---- a calibration of this machine ----

namespace {
// The fit that times a call: all-to-all-v by the all-to-all's.
std::string fitted(const PassItem& it) { return it.collective == "all_to_allv" ? "all_to_all" : it.collective; }
}  // namespace

Timing CalibrationCosts::time(const PassItem& it, std::string* what) const {
  if (it.comm) {
    const std::string coll = fitted(it);
    const Timing t = cal_.collective(coll, it.group, it.bytes, fabric_, it.posted, it.overlapped);
    if (t.extrapolated) *what = fmt::format("{} of {} B over {} ranks", coll, it.bytes, it.group);
    return t;
  }
  if (it.op == Op::kMatmul) {
    const Timing t = cal_.gemm(it.part, it.m, it.n, it.k);
    if (t.extrapolated)
      *what = fmt::format("GEMM {} {}x{}x{} (not measured: scaled from the nearest measured shape)", it.part, it.m, it.n, it.k);
    return t;
  }
  return {it.units * cal_.rate(op_name(it.op), it.phase, it.part), false};
}

double CalibrationCosts::arrival_skew(const std::string& dim, const std::string& coll) const {
  if (!cal_.arrival_skews.empty()) {
    const auto it = cal_.arrival_skews.find(dim + "/" + coll);
    if (it != cal_.arrival_skews.end()) return it->second;
  }
  return std::isfinite(cal_.arrival_skew) ? cal_.arrival_skew : 0.0;
}

double CalibrationCosts::post_seconds(const PassItem& it) const {
  const auto f = cal_.post_factors.find(it.dim + "/" + it.collective);
  if (f == cal_.post_factors.end()) return 0;
  return f->second * cal_.fit(fitted(it), it.group, it.bytes, fabric_).seconds;
}

namespace {
// "key value, key value" of a calibration's per-key factors, `digits` after the point.
std::string listed(const std::map<std::string, double>& m, int digits) {
  std::string out;
  for (const auto& [k, v] : m) out += fmt::format("{}{} {:.{}f}", out.empty() ? "" : ", ", k, v, digits);
  return out;
}
}  // namespace

std::vector<std::string> CalibrationCosts::notes() const {
  std::vector<std::string> out;
  if (cal_.in_step_factor != 1 || !cal_.in_step_factors.empty()) {
    const std::string f = listed(cal_.in_step_factors, 2);
    out.push_back(fmt::format("collectives {:.2f}x their isolated fits inside a step ({}; the others the overall factor)",
                              cal_.in_step_factor, f));
  }
  if (std::isfinite(cal_.posted_factor) || !cal_.posted_factors.empty()) {
    const std::string f = listed(cal_.posted_factors, 2);
    out.push_back(fmt::format("posted calls (dp, edp: the buckets, ZeRO's reductions and gathers) {:.2f}x their "
                              "fits from the wait on ({}; the others the overall posted factor)",
                              std::isfinite(cal_.posted_factor) ? cal_.posted_factor : 1.0, f));
  }
  if (std::isfinite(cal_.overlapped_factor) || !cal_.overlapped_factors.empty()) {
    const std::string f = listed(cal_.overlapped_factors, 2);
    out.push_back(fmt::format("ZeRO-3's calls that the polls complete (its prefetched gathers, its reduce-scatters "
                              "before the step's last) {:.2f}x their fits at their wait ({}), without a meeting",
                              std::isfinite(cal_.overlapped_factor) ? cal_.overlapped_factor : 0.0, f));
  } else
    out.push_back("no overlapped factors in the calibration: ZeRO-3's calls that the polls complete take the posted "
                  "factors, without a meeting");
  if (!cal_.post_factors.empty()) {
    const std::string f = listed(cal_.post_factors, 3);
    out.push_back(fmt::format("posting a call charged its site's share of the fit ({})", f));
  } else
    out.push_back("no post factors in the calibration: the time spent posting a call is not charged");
  const double skew = std::isfinite(cal_.arrival_skew) ? cal_.arrival_skew : 0.0;
  if (skew > 0 || !cal_.arrival_skews.empty()) {
    const std::string per = listed(cal_.arrival_skews, 3);
    out.push_back(fmt::format("arrival skew {:.3f} s per s of compute since a group last met (half charged "
                              "to each collective, the mean over ranks){}", skew,
                              per.empty() ? "" : fmt::format("; per call site (dim/collective) {}, the others the overall", per)));
  } else
    out.push_back("no arrival skew in the calibration: collectives charged as if every rank arrived at once");
  return out;
}

// ---- a cluster description ----

namespace {

comm::GroupKind kind_of(const std::string& dim) {
  using comm::GroupKind;
  if (dim == "tp") return GroupKind::kTp;
  if (dim == "cp") return GroupKind::kCp;
  if (dim == "dp") return GroupKind::kDpCp;  // the dense gradients' group (dp x cp), as the step lists size it
  if (dim == "ep") return GroupKind::kEp;
  if (dim == "edp") return GroupKind::kEdp;
  if (dim == "etp") return GroupKind::kEtp;
  if (dim == "pp") return GroupKind::kPp;
  return GroupKind::kEmbedding;
}

// Bytes each element moves through HBM per op (bf16 activations: 2 B per access; forward and
// backward accesses counted per element: read input, write output, the backward also reads
// the saved input); AdamW per parameter: fp32 gradient, master weight and two moments read
// (16 B), the master and moments written (12 B), the bf16 weight written (2 B).
double bytes_per_element(Op op, char phase) {
  const bool bwd = phase == 'B';
  switch (op) {
    case Op::kAdamW: return 30;
    case Op::kLayerNorm: return bwd ? 8 : 4;
    case Op::kGelu: return bwd ? 6 : 4;
    case Op::kResidual: return 6;
    default: return 4;  // embedding, loss, router, permute, copy, attention's rowdot
  }
}

// The step lists count payloads in fp32 (the engine's). On a GPU activations and their
// gradients travel in bf16 (half); gradient reductions in fp32 (Megatron's and Llama 3's
// default); ZeRO's parameter gathers in bf16.
double gpu_wire_bytes(const PassItem& it) {
  const double b = static_cast<double>(it.bytes);
  if (it.dim == "dp" || it.dim == "edp" || it.dim == "embedding") return it.collective == "all_gather" ? b / 2 : b;
  return b / 2;
}

}  // namespace

ClusterCosts::ClusterCosts(Cluster c, const Plan& plan) : c_(std::move(c)) {
  const int G = c_.gpus_per_node;
  if (plan.world > G && plan.world % G != 0)
    throw UsageError(fmt::format("--predict {}: [node] gpus = {} does not divide the world ({} ranks): the plan must "
                                 "fill whole nodes",
                                 c_.path, G, plan.world));
  const comm::Degrees& d = plan.degrees;
  comm::MeshSpec spec{d.tp, d.cp, d.ep, d.dp, d.pp, d.etp, d.edp};
  const comm::RankGrid grid(plan.world, spec, plan.order);
  for (const std::string dim : {"tp", "cp", "dp", "ep", "edp", "etp", "pp", "embedding"}) {
    if ((dim == "edp" || dim == "etp") && !plan.experts_placed()) continue;  // the expert grid's: MoE plans only
    if (dim == "embedding" && !(d.pp > 1 && plan.model.tied)) continue;
    const comm::GroupKind k = kind_of(dim);
    const auto& groups = grid.groups(k);
    if (groups.empty() || groups.front().size() < 2) continue;
    GroupSpan s;
    s.size = static_cast<int>(groups.front().size());
    std::map<int, int> per_node;
    for (int r : groups.front()) ++per_node[r / G];
    s.nodes = static_cast<int>(per_node.size());
    for (const auto& [n, count] : per_node) s.per_node = std::max(s.per_node, count);
    if (dim == "pp") {  // neighbours exchange: across nodes when any two adjacent stages are
      const auto& g = groups.front();
      s.nodes = 1;
      for (size_t i = 1; i < g.size(); ++i)
        if (g[i] / G != g[i - 1] / G) s.nodes = 2;
      s.per_node = s.nodes == 1 ? s.size : 1;
    }
    if (s.crosses_nodes() && !c_.has_inter)
      throw UsageError(fmt::format("--predict {}: the plan's {} group of {} ranks spans {} nodes of {} GPUs, and the file "
                                   "has no [inter] network",
                                   c_.path, dim, s.size, s.nodes, G));
    spans_[dim] = s;
  }
}

double ClusterCosts::collective(const std::string& coll, double S, const GroupSpan& span) const {
  const int n = span.size;
  if (n < 2) return 0;
  const Link& in = c_.intra;
  const Link out{c_.has_inter ? c_.inter.bytes_per_s / c_.oversubscription : in.bytes_per_s, c_.inter.latency_s};
  // one level: n ranks over one kind of link
  auto all_reduce = [&](double bytes, int k, const Link& l) {
    if (k < 2) return 0.0;
    const double steps = c_.algorithm == "tree" ? 2 * std::ceil(std::log2(k)) : 2.0 * (k - 1);
    return comm::bus_factor(comm::Collective::kAllReduce, k) * bytes / l.bytes_per_s + steps * l.latency_s;
  };
  auto gather = [&](double bytes, int k, const Link& l) {  // all-gather or reduce-scatter of `bytes` in all
    if (k < 2) return 0.0;
    return comm::bus_factor(comm::Collective::kAllGather, k) * bytes / l.bytes_per_s + (k - 1) * l.latency_s;
  };
  const bool across = span.crosses_nodes();
  const int g = span.per_node, m = span.nodes;
  if (coll == "sendrecv") return S / (across ? out : in).bytes_per_s + (across ? out : in).latency_s;
  if (!across) {
    if (coll == "all_reduce") return all_reduce(S, n, in);
    if (coll == "all_to_all" || coll == "all_to_allv" || coll == "all_gather" || coll == "reduce_scatter") return gather(S, n, in);
    return S / in.bytes_per_s + std::ceil(std::log2(n)) * in.latency_s;  // broadcast
  }
  if (coll == "all_to_all" || coll == "all_to_allv") {  // each rank's blocks to the other nodes leave by its NIC
    const double intra_part = double(g - 1) / n * S, inter_part = double(n - g) / n * S;
    return std::max(intra_part / in.bytes_per_s, inter_part / out.bytes_per_s) + (m - 1) * out.latency_s +
           (g - 1) * in.latency_s;
  }
  if (!c_.hierarchical || g < 2) {  // one flat ring over n ranks: the slowest link sets the pace
    const Link slow{out.bytes_per_s, std::max(in.latency_s, out.latency_s)};
    if (coll == "all_reduce") return all_reduce(S, n, slow);
    return gather(S, n, slow);
  }
  // hierarchical: inside the nodes over g ranks, across them over m ranks with 1/g of the data
  if (coll == "all_reduce") return gather(S, g, in) + all_reduce(S / g, m, out) + gather(S, g, in);
  if (coll == "all_gather" || coll == "reduce_scatter") return gather(S / g, m, out) + gather(S, g, in);
  return S / out.bytes_per_s + std::ceil(std::log2(n)) * out.latency_s;  // broadcast
}

double ClusterCosts::wire_bytes(const PassItem& it) const { return gpu_wire_bytes(it); }

Timing ClusterCosts::time(const PassItem& it, std::string*) const {
  if (it.comm) {
    const auto s = spans_.find(it.dim);
    const GroupSpan span = s != spans_.end() ? s->second : GroupSpan{it.group, 1, it.group};
    return {collective(it.collective, gpu_wire_bytes(it), span), false};
  }
  // The roofline: the larger of the FLOPs over peak x efficiency and the bytes over HBM
  // bandwidth x efficiency. A GEMM reads its two bf16 operands and writes its output (per GEMM
  // of the item: units / 2mnk of them); attention's bytes are its FLOPs' small share (flash keeps
  // the tiles on chip) and it is timed by FLOPs; the elementwise ops by bytes.
  const double peak = c_.gpu.peak_bf16_flops, hbm = c_.gpu.hbm_bytes_per_s * c_.eff_memory;
  if (it.op == Op::kMatmul) {
    const double one = 2.0 * it.m * it.n * it.k;
    const double gemms = one > 0 ? it.units / one : 0;
    const double bytes = gemms * 2.0 * (double(it.m) * it.k + double(it.k) * it.n + double(it.m) * it.n);
    return {std::max(it.units / (peak * c_.gemm_efficiency(one)), bytes / hbm), false};
  }
  if (it.op == Op::kAttention && it.part != "rowdot") return {it.units / (peak * c_.eff_attention), false};
  return {it.units * bytes_per_element(it.op, it.phase) / hbm, false};
}

std::map<std::string, bool> ClusterCosts::crosses_nodes() const {
  std::map<std::string, bool> out;
  for (const auto& [dim, s] : spans_) out[dim] = s.crosses_nodes();
  return out;
}

std::vector<std::string> ClusterCosts::notes() const {
  std::vector<std::string> out;
  out.push_back(fmt::format("cluster {} ({} x {} per node): GEMMs at {:.0f}% and attention at {:.0f}% of the {:.0f} TFLOP/s "
                            "bf16 peak, elementwise ops at {:.0f}% of {:.2f} TB/s HBM (efficiency source: {})",
                            c_.name, c_.gpus_per_node, c_.gpu.name, 100 * c_.eff_gemm, 100 * c_.eff_attention,
                            c_.gpu.peak_bf16_flops / 1e12, 100 * c_.eff_memory, c_.gpu.hbm_bytes_per_s / 1e12,
                            c_.efficiency_source));
  std::string spans;
  for (const auto& [dim, s] : spans_)
    spans += fmt::format("{}{} {} ranks on {} node{}", spans.empty() ? "" : ", ", dim, s.size, s.nodes, s.nodes > 1 ? "s" : "");
  out.push_back(fmt::format("groups: {}; collectives {}{}, activations bf16, gradient reductions fp32", spans.empty() ? "none" : spans,
                            c_.algorithm, c_.hierarchical ? ", hierarchical across nodes" : ""));
  out.push_back("posted data-parallel calls overlap the last backward (the GPU's collectives run on their own stream); "
                "no arrival skew (a description has no noise model)");
  return out;
}

std::unique_ptr<Costs> read_costs(const std::string& path, const std::string& fabric, const Plan& plan) {
  if (is_cluster_file(path)) {
    if (!fabric.empty())
      throw UsageError(fmt::format("--predict-fabric {}: names a fit of a calibration file; {} is a cluster description",
                                   fabric, path));
    return std::make_unique<ClusterCosts>(read_cluster(path), plan);
  }
  return std::make_unique<CalibrationCosts>(read_calibration(path), fabric);
}

}  // namespace meshbench::parallel
