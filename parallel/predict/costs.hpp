// What each item of the step model's lists costs (predict.hpp walks the lists, this times
// them): from a calibration file of this machine (CalibrationCosts: the collective fits, the
// measured GEMMs and rates, the in-step and posted factors, the arrival skew), or from a
// cluster description (ClusterCosts, cluster.hpp: datasheet peaks times an efficiency table,
// ring or tree collectives over the links each group spans). read_costs picks by the file:
// a .toml file is a cluster, anything else a calibration.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "predict/calibration.hpp"
#include "predict/cluster.hpp"
#include "predict/op_list.hpp"
#include "common/plan.hpp"

namespace meshbench::parallel {

class Costs {
 public:
  virtual ~Costs() = default;
  // Seconds of one item; `extrapolated` with `what` when beyond what the source measured.
  virtual Timing time(const PassItem& it, std::string* what) const = 0;
  // Arrival skew per second of compute since a group last met, at a call of collective `coll`
  // over dimension `dim` (0: none).
  virtual double arrival_skew(const std::string& /*dim*/, const std::string& /*coll*/) const { return 0; }
  // Seconds a rank spends posting one call of `it` (exposed in the time split; 0: not charged).
  virtual double post_seconds(const PassItem& /*it*/) const { return 0; }
  // Posted data-parallel calls overlap the last backward (a GPU's collectives run on their own
  // stream), as --progress thread makes them on this backend.
  virtual bool overlaps_posted() const { return false; }
  // Bytes one call of `it` puts in its buffer on the wire (its payload S as sent): the items
  // count fp32 payloads, as the engine sends them.
  virtual double wire_bytes(const PassItem& it) const { return static_cast<double>(it.bytes); }
  virtual std::string wire_rule() const { return "fp32 payloads, as the engine sends them"; }
  virtual std::string source() const = 0;   // the file
  virtual std::string fabric() const { return ""; }
  virtual std::vector<std::string> notes() const = 0;
  virtual const Cluster* cluster() const { return nullptr; }
  // Per dimension of the plan's groups: whether they span nodes (empty: no placement known).
  virtual std::map<std::string, bool> crosses_nodes() const { return {}; }
};

class CalibrationCosts : public Costs {
 public:
  CalibrationCosts(Calibration cal, std::string fabric) : cal_(std::move(cal)), fabric_(std::move(fabric)) {}
  Timing time(const PassItem& it, std::string* what) const override;
  double arrival_skew(const std::string& dim, const std::string& coll) const override;
  double post_seconds(const PassItem& it) const override;
  std::string source() const override { return cal_.path; }
  std::string fabric() const override { return fabric_; }
  std::vector<std::string> notes() const override;
  const Calibration& calibration() const { return cal_; }

 private:
  Calibration cal_;
  std::string fabric_;
};

// A group's place on the cluster: its size, the nodes it spans and its GPUs per node.
struct GroupSpan {
  int size = 1, nodes = 1, per_node = 1;
  bool crosses_nodes() const { return nodes > 1; }
};

class ClusterCosts : public Costs {
 public:
  // Throws UsageError (naming the field) when the plan's world does not fill whole nodes, or a
  // group spans nodes and the file gives no [inter] network.
  ClusterCosts(Cluster c, const Plan& plan);
  Timing time(const PassItem& it, std::string* what) const override;
  bool overlaps_posted() const override { return true; }
  // A GPU's: activations and their gradients bf16, gradient reductions fp32, ZeRO's gathers bf16.
  double wire_bytes(const PassItem& it) const override;
  std::string wire_rule() const override {
    return "a GPU's: activations and their gradients bf16, gradient reductions fp32, ZeRO's parameter gathers bf16";
  }
  std::string source() const override { return c_.path; }
  std::vector<std::string> notes() const override;
  const Cluster* cluster() const override { return &c_; }
  std::map<std::string, bool> crosses_nodes() const override;
  // Seconds of one collective of payload S (the binaries' S, docs/collectives.md) over `span`.
  double collective(const std::string& coll, double bytes, const GroupSpan& span) const;

 private:
  Cluster c_;
  std::map<std::string, GroupSpan> spans_;
};

// A calibration file or a cluster description (is_cluster_file), for `plan`.
std::unique_ptr<Costs> read_costs(const std::string& path, const std::string& fabric, const Plan& plan);

}  // namespace meshbench::parallel
