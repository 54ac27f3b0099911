#include "predict/cluster.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

#include <fmt/core.h>
#include <toml++/toml.h>

#include "core/error.hpp"

namespace meshbench::parallel {

using core::UsageError;

bool is_cluster_file(const std::string& path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".toml") == 0;
}

namespace {

class Reader {
 public:
  Reader(const std::string& path, const toml::table& t) : path_(path), t_(t) {}

  // A number > 0 (or >= 0 with `zero_ok`) at [section] key.
  double num(std::string_view section, std::string_view key, bool zero_ok = false) const {
    const std::optional<double> v = t_[section][key].value<double>();
    if (!t_[section][key]) throw bad(section, key, "is missing");
    if (!v || !std::isfinite(*v)) throw bad(section, key, "is not a number");
    if (zero_ok ? *v < 0 : *v <= 0) throw bad(section, key, zero_ok ? "must be >= 0" : "must be > 0");
    return *v;
  }
  std::string str(std::string_view section, std::string_view key, std::optional<std::string> fallback = {}) const {
    const auto node = section.empty() ? t_[key] : t_[section][key];
    if (!node) {
      if (fallback) return *fallback;
      throw bad(section, key, "is missing");
    }
    const std::optional<std::string> v = node.value<std::string>();
    if (!v) throw bad(section, key, "is not a string");
    return *v;
  }
  bool has(std::string_view section) const { return static_cast<bool>(t_[section]); }
  UsageError bad(std::string_view section, std::string_view key, std::string_view what) const {
    return UsageError(fmt::format("--predict {}: {}{} {}", path_, section.empty() ? "" : fmt::format("[{}] ", section),
                                  key, what));
  }

 private:
  const std::string& path_;
  const toml::table& t_;
};

}  // namespace

Cluster read_cluster(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw UsageError(fmt::format("--predict {}: not a cluster description (TOML, line {}: {})", path, where.line,
                                 e.description()));
  }
  const Reader r(path, t);
  Cluster c;
  c.path = path;
  c.name = r.str("", "name");
  c.gpu.name = r.str("gpu", "name");
  c.gpu.peak_bf16_flops = r.num("gpu", "peak_bf16_tflops") * 1e12;
  c.gpu.peak_fp32_flops = r.num("gpu", "peak_fp32_tflops") * 1e12;
  c.gpu.hbm_bytes = r.num("gpu", "hbm_gib") * double(1ull << 30);
  c.gpu.hbm_bytes_per_s = r.num("gpu", "hbm_tb_per_s") * 1e12;
  const double gpus = r.num("node", "gpus");
  if (gpus != std::floor(gpus) || gpus > 1024) throw r.bad("node", "gpus", "must be a whole number of GPUs (at most 1024)");
  c.gpus_per_node = static_cast<int>(gpus);
  c.intra = {r.num("intra", "bandwidth_gb_per_s") * 1e9, r.num("intra", "latency_us", true) * 1e-6};
  if (r.has("inter")) {
    c.has_inter = true;
    c.inter = {r.num("inter", "nic_gb_per_s") * 1e9, r.num("inter", "latency_us", true) * 1e-6};
    const double rails = r.num("inter", "rails");
    if (rails != std::floor(rails)) throw r.bad("inter", "rails", "must be a whole number");
    c.rails = static_cast<int>(rails);
    c.oversubscription = t["inter"]["oversubscription"] ? r.num("inter", "oversubscription") : 1.0;
    if (c.oversubscription < 1) throw r.bad("inter", "oversubscription", "must be >= 1 (1: full bisection)");
    if (c.inter.bytes_per_s > c.intra.bytes_per_s)
      throw r.bad("inter", "nic_gb_per_s", fmt::format("({} GB/s) exceeds [intra] bandwidth_gb_per_s ({} GB/s): contradictory",
                                                       c.inter.bytes_per_s / 1e9, c.intra.bytes_per_s / 1e9));
  }
  c.algorithm = r.str("collectives", "algorithm", std::string("ring"));
  if (c.algorithm != "ring" && c.algorithm != "tree") throw r.bad("collectives", "algorithm", "must be ring or tree");
  if (t["collectives"]["hierarchical"]) {
    const std::optional<bool> h = t["collectives"]["hierarchical"].value<bool>();
    if (!h) throw r.bad("collectives", "hierarchical", "must be true or false");
    c.hierarchical = *h;
  }
  c.eff_gemm = r.num("efficiency", "gemm");
  c.eff_attention = r.num("efficiency", "attention");
  c.eff_memory = r.num("efficiency", "memory");
  for (const auto& [k, v] : {std::pair{"gemm", c.eff_gemm}, std::pair{"attention", c.eff_attention},
                             std::pair{"memory", c.eff_memory}})
    if (v > 1) throw r.bad("efficiency", k, "is a fraction of peak: at most 1");
  c.efficiency_source = r.str("efficiency", "source");
  if (const toml::array* a = t["efficiency"]["gemm_by_gflop"].as_array()) {
    for (const toml::node& row : *a) {
      const toml::array* pair = row.as_array();
      const std::optional<double> g = pair && pair->size() == 2 ? (*pair)[0].value<double>() : std::nullopt;
      const std::optional<double> e = pair && pair->size() == 2 ? (*pair)[1].value<double>() : std::nullopt;
      if (!g || !e || *g < 0 || *e <= 0 || *e > 1)
        throw r.bad("efficiency", "gemm_by_gflop", "must be a list of [GFLOP >= 0, fraction in (0, 1]] pairs");
      c.gemm_by_gflop.emplace_back(*g, *e);
    }
    std::sort(c.gemm_by_gflop.begin(), c.gemm_by_gflop.end());
  } else if (t["efficiency"]["gemm_by_gflop"]) {
    throw r.bad("efficiency", "gemm_by_gflop", "must be a list of [GFLOP >= 0, fraction in (0, 1]] pairs");
  }
  return c;
}

double Cluster::gemm_efficiency(double flops) const {
  if (gemm_by_gflop.empty()) return eff_gemm;
  double e = gemm_by_gflop.front().second;
  for (const auto& [g, f] : gemm_by_gflop)
    if (flops >= g * 1e9) e = f;
  return e;
}

}  // namespace meshbench::parallel
