#include "predict/calibration.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "results/h5.hpp"

namespace meshbench::parallel {

using core::UsageError;
using results::H5Id;

namespace {

// One compound table read whole in its native layout; columns fetched by name.
class Table {
 public:
  Table(hid_t file, const std::string& name, const std::string& path) : path_(path), name_(name) {
    if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) return;
    H5Id ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (ds.get() < 0) throw UsageError(fmt::format("--predict {}: cannot open {}", path, name));
    H5Id ft(H5Dget_type(ds.get()), H5Tclose);
    if (H5Tget_class(ft.get()) != H5T_COMPOUND) throw UsageError(fmt::format("--predict {}: {} is not a table", path, name));
    type_ = H5Id(H5Tget_native_type(ft.get(), H5T_DIR_ASCEND), H5Tclose);
    H5Id sp(H5Dget_space(ds.get()), H5Sclose);
    hsize_t n = 0;
    if (H5Sget_simple_extent_ndims(sp.get()) == 1) H5Sget_simple_extent_dims(sp.get(), &n, nullptr);
    rows_ = static_cast<size_t>(n);
    row_bytes_ = H5Tget_size(type_.get());
    buf_.resize(rows_ * row_bytes_);
    if (rows_ > 0 && H5Dread(ds.get(), type_.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf_.data()) < 0)
      throw UsageError(fmt::format("--predict {}: cannot read {}", path, name));
  }
  size_t rows() const { return rows_; }
  bool exists() const { return type_.get() >= 0; }

  std::string str(size_t row, const char* col) const {
    const auto [off, t] = member(col, H5T_STRING);
    const size_t n = H5Tget_size(t.get());
    const char* p = buf_.data() + row * row_bytes_ + off;
    return std::string(p, strnlen(p, n));
  }
  double num(size_t row, const char* col) const {
    const int idx = index(col);
    const size_t off = H5Tget_member_offset(type_.get(), static_cast<unsigned>(idx));
    H5Id t(H5Tget_member_type(type_.get(), static_cast<unsigned>(idx)), H5Tclose);
    const char* p = buf_.data() + row * row_bytes_ + off;
    const size_t n = H5Tget_size(t.get());
    switch (H5Tget_class(t.get())) {
      case H5T_FLOAT: {
        if (n == 8) { double v; std::memcpy(&v, p, 8); return v; }
        float v; std::memcpy(&v, p, 4); return v;
      }
      case H5T_INTEGER: {
        const bool sign = H5Tget_sign(t.get()) == H5T_SGN_2;
        if (n == 8) { if (sign) { int64_t v; std::memcpy(&v, p, 8); return double(v); } uint64_t v; std::memcpy(&v, p, 8); return double(v); }
        if (n == 4) { if (sign) { int32_t v; std::memcpy(&v, p, 4); return v; } uint32_t v; std::memcpy(&v, p, 4); return v; }
        break;
      }
      default: break;
    }
    throw UsageError(fmt::format("--predict {}: {}.{} is not a number", path_, name_, col));
  }

 private:
  int index(const char* col) const {
    const int idx = H5Tget_member_index(type_.get(), col);
    if (idx < 0) throw UsageError(fmt::format("--predict {}: table {} has no column {}", path_, name_, col));
    return idx;
  }
  std::pair<size_t, H5Id> member(const char* col, H5T_class_t want) const {
    const int idx = index(col);
    H5Id t(H5Tget_member_type(type_.get(), static_cast<unsigned>(idx)), H5Tclose);
    if (H5Tget_class(t.get()) != want || H5Tis_variable_str(t.get()) > 0)
      throw UsageError(fmt::format("--predict {}: {}.{} is not a fixed-length string", path_, name_, col));
    return {H5Tget_member_offset(type_.get(), static_cast<unsigned>(idx)), std::move(t)};
  }
  std::string path_, name_;
  H5Id type_;
  size_t rows_ = 0, row_bytes_ = 0;
  std::vector<char> buf_;
};

std::string read_str_attr(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return {};
  H5Id a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  H5Id t(H5Aget_type(a.get()), H5Tclose);
  if (H5Tget_class(t.get()) != H5T_STRING) return {};
  if (H5Tis_variable_str(t.get()) > 0) {
    H5Id mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt.get(), H5T_VARIABLE);
    H5Tset_cset(mt.get(), H5Tget_cset(t.get()));  // h5py writes UTF-8
    char* s = nullptr;
    if (H5Aread(a.get(), mt.get(), &s) < 0 || s == nullptr) return {};
    std::string v(s);
    H5free_memory(s);
    return v;
  }
  const size_t n = H5Tget_size(t.get());
  std::string v(n, '\0');
  H5Id mt(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mt.get(), n);
  H5Tset_cset(mt.get(), H5Tget_cset(t.get()));
  if (H5Aread(a.get(), mt.get(), v.data()) < 0) return {};
  v.resize(strnlen(v.data(), n));
  return v;
}

double read_num_attr(hid_t obj, const char* name, double dflt) {
  if (H5Aexists(obj, name) <= 0) return dflt;
  H5Id a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  double v = dflt;
  if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) return dflt;
  return v;
}

}  // namespace

Calibration read_calibration(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // the messages below say what is wrong
  if (!results::is_hdf5(path))
    throw UsageError(fmt::format("--predict {}: not found or not an HDF5 file (make one with scripts/calibrate --out)", path));
  H5Id f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (f.get() < 0) throw UsageError(fmt::format("--predict {}: cannot open", path));
  const std::string kind = read_str_attr(f.get(), "kind");
  if (kind != "meshbench calibration")
    throw UsageError(fmt::format("--predict {}: not a calibration file (kind '{}'; scripts/calibrate writes one)", path, kind));
  const double version = read_num_attr(f.get(), "format_version", 0);
  if (version != 1 && version != 2)
    throw UsageError(fmt::format("--predict {}: calibration format_version {} (this build reads 1 and 2)", path, version));
  Calibration cal;
  cal.path = path;
  // The fits: one row per segment, grouped by key in file order.
  const Table fits(f.get(), "/collectives/fits", path);
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < fits.rows(); ++i) {
    CollectiveFit k{fits.str(i, "collective"), fits.str(i, "backend"), fits.str(i, "dtype"), fits.str(i, "span"),
                    fits.str(i, "tag"), static_cast<int>(fits.num(i, "group_size")), {}};
    const std::string id = fmt::format("{}|{}|{}|{}|{}|{}", k.collective, k.backend, k.dtype, k.span, k.tag, k.group_size);
    auto it = at.find(id);
    if (it == at.end()) {
      it = at.emplace(id, cal.fits.size()).first;
      cal.fits.push_back(std::move(k));
    }
    const double beta = fits.num(i, "beta"), alpha = fits.num(i, "alpha");
    if (!(alpha >= 0) || !(beta >= 0))
      throw UsageError(fmt::format("--predict {}: fit {} has a negative or missing alpha/beta", path, id));
    cal.fits[it->second].segments.push_back(
        {static_cast<uint64_t>(fits.num(i, "lo")), static_cast<uint64_t>(fits.num(i, "hi")), alpha, beta});
  }
  for (CollectiveFit& k : cal.fits)
    std::sort(k.segments.begin(), k.segments.end(), [](const FitSegment& a, const FitSegment& b) { return a.lo < b.lo; });
  // The compute rates (format_version 2).
  const Table gemm(f.get(), "/compute/gemm", path);
  for (size_t i = 0; i < gemm.rows(); ++i)
    cal.gemms.push_back({gemm.str(i, "part"), static_cast<int>(gemm.num(i, "m")), static_cast<int>(gemm.num(i, "n")),
                         static_cast<int>(gemm.num(i, "k")), gemm.num(i, "flops"), gemm.num(i, "seconds")});
  const Table rates(f.get(), "/compute/rates", path);
  for (size_t i = 0; i < rates.rows(); ++i)
    cal.rates.push_back({rates.str(i, "op"), rates.str(i, "phase"), rates.str(i, "part"), rates.str(i, "unit"),
                         rates.num(i, "seconds_per_unit")});
  if (H5Lexists(f.get(), "/compute", H5P_DEFAULT) > 0) {
    H5Id g(H5Gopen2(f.get(), "/compute", H5P_DEFAULT), H5Gclose);
    cal.threads = static_cast<int>(read_num_attr(g.get(), "threads", 0));
    cal.arrival_skew = read_num_attr(g.get(), "arrival_skew", std::numeric_limits<double>::quiet_NaN());
    cal.in_step_factor = read_num_attr(g.get(), "in_step_factor", 1.0);
    cal.posted_factor = read_num_attr(g.get(), "posted_factor", std::numeric_limits<double>::quiet_NaN());
    cal.overlapped_factor = read_num_attr(g.get(), "overlapped_factor", std::numeric_limits<double>::quiet_NaN());
    for (const auto& [attr, into] : {std::pair{"in_step_factors", &cal.in_step_factors},
                                     std::pair{"posted_factors", &cal.posted_factors},
                                     std::pair{"overlapped_factors", &cal.overlapped_factors},
                                     std::pair{"post_factors", &cal.post_factors},
                                     std::pair{"arrival_skews", &cal.arrival_skews}}) {
      const std::string factors = read_str_attr(g.get(), attr);
      if (factors.empty()) continue;
      const nlohmann::json j = nlohmann::json::parse(factors, nullptr, false);
      if (!j.is_object()) throw UsageError(fmt::format("--predict {}: /compute {} is not a JSON object", path, attr));
      for (const auto& [k, v] : j.items())
        if (v.is_number()) (*into)[k] = v.get<double>();
    }
  }
  return cal;
}

Timing Calibration::collective(const std::string& coll, int group_size, uint64_t bytes, const std::string& tag,
                                bool posted, bool overlapped) const {
  const Timing t = fit(coll, group_size, bytes, tag);
  return {t.seconds * factor_of(coll, posted, overlapped), t.extrapolated};
}

Timing Calibration::fit(const std::string& coll, int group_size, uint64_t bytes, const std::string& tag) const {
  std::vector<const CollectiveFit*> hit;
  std::set<std::string> tags, sizes;
  for (const CollectiveFit& k : fits) {
    if (k.collective != coll || k.dtype != "float") continue;
    sizes.insert(std::to_string(k.group_size));
    if (k.group_size != group_size) continue;
    tags.insert(k.tag);
    if (!tag.empty() && k.tag != tag) continue;
    hit.push_back(&k);
  }
  const std::string fabric = tag.empty() ? std::string("any fabric") : fmt::format("fabric tag '{}'", tag);
  if (hit.empty()) {
    std::string have;
    for (const std::string& s : sizes) have += (have.empty() ? "" : ", ") + s;
    throw UsageError(fmt::format("--predict {}: no fit for {} over {} ranks ({}) of float; the file fits it for group "
                                 "sizes [{}]{} (measure it: mpiexec -n {} build/bin/{}_bench --tag TAG, then "
                                 "scripts/calibrate)",
                                 path, coll, group_size, fabric, have,
                                 tags.empty() ? std::string() : fmt::format(" and tags [{}] at this size", fmt::to_string(fmt::join(tags, ", "))),
                                 group_size, coll == "sendrecv" ? std::string("sendrecv") : coll));
  }
  if (hit.size() > 1) {
    std::set<std::string> t;
    for (const CollectiveFit* k : hit) t.insert("'" + k->tag + "' (" + k->backend + ", " + k->span + ")");
    throw UsageError(fmt::format("--predict {}: {} over {} ranks has fits for several fabrics or backends: {}; name one "
                                 "with --predict-fabric TAG",
                                 path, coll, group_size, fmt::to_string(fmt::join(t, ", "))));
  }
  const CollectiveFit& k = *hit.front();
  if (k.segments.empty()) throw UsageError(fmt::format("--predict {}: the fit of {} over {} ranks has no segment", path, coll, group_size));
  const auto& s = k.segments;
  const double n = static_cast<double>(std::max<uint64_t>(bytes, 1));
  const FitSegment* seg = &s.front();
  bool extra = bytes < s.front().lo || bytes > s.back().hi;
  if (bytes > s.back().hi) seg = &s.back();
  else if (bytes >= s.front().lo)
    for (size_t i = 0; i < s.size(); ++i) {
      if (bytes <= s[i].hi) {
        seg = &s[i];
        // in the gap before segment i: the nearer in log size (the geometric mean splits it)
        if (i > 0 && bytes < s[i].lo && n < std::sqrt(double(s[i - 1].hi) * double(s[i].lo))) seg = &s[i - 1];
        break;
      }
    }
  return {seg->alpha + seg->beta * double(bytes), extra};
}

Timing Calibration::gemm(const std::string& part, int m, int n, int k) const {
  // A row's seconds are per call of its op, which may run several GEMMs of the shape (a
  // backward's dinput and dweight): its flops over 2 m n k. A shape not measured is scaled
  // from the part's row nearest in m n k by the ratio of their FLOPs.
  const double mnk = double(m) * n * k;
  const GemmTime* best = nullptr;
  double dist = std::numeric_limits<double>::infinity();
  for (const GemmTime& g : gemms) {
    if (g.part != part) continue;
    if (g.m == m && g.n == n && g.k == k) return {g.seconds, false};
    const double d = std::fabs(std::log(std::max(double(g.m) * g.n * g.k, 1.0) / std::max(mnk, 1.0)));
    if (d < dist) dist = d, best = &g;
  }
  if (best == nullptr)
    throw UsageError(fmt::format("--predict {}: no measured GEMM of part '{}' (needed for {} x {} x {}); measure the "
                                 "compute rates with scripts/calibrate --compute",
                                 path, part, m, n, k));
  return {best->seconds * mnk / std::max(double(best->m) * best->n * best->k, 1.0), true};
}

double Calibration::rate(const std::string& op, char phase, const std::string& part) const {
  const std::string ph(1, phase);
  for (const OpRate& r : rates)
    if (r.op == op && r.phase == ph && r.part == part) return r.seconds_per_unit;
  throw UsageError(fmt::format("--predict {}: no compute rate for op '{}' phase {} part '{}'; measure the compute rates "
                               "with scripts/calibrate --compute (its runs must include a plan that runs that op)",
                               path, op, ph, part));
}

}  // namespace meshbench::parallel
