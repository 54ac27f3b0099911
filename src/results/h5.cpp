#include "results/h5.hpp"

#include <initializer_list>
#include <limits>
#include <vector>

#include "core/error.hpp"

namespace meshbench::results {
namespace {

H5Id collective_xfer() {
  H5Id dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE);
  return dxpl;
}

// A float64 dataset [0 (unlimited), tail...], one row per chunk, NaN where never written.
H5Id growing_f64(hid_t loc, const std::string& name, const std::vector<hsize_t>& tail, hsize_t chunk_rows = 1) {
  std::vector<hsize_t> dims{0}, maxdims{H5S_UNLIMITED}, chunk{chunk_rows};
  for (hsize_t d : tail) {
    dims.push_back(d);
    maxdims.push_back(d);
    chunk.push_back(d);
  }
  auto rank = static_cast<int>(dims.size());
  H5Id space(H5Screate_simple(rank, dims.data(), maxdims.data()), H5Sclose);
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(dcpl.get(), rank, chunk.data());
  double nan = std::numeric_limits<double>::quiet_NaN();
  H5Pset_fill_value(dcpl.get(), H5T_NATIVE_DOUBLE, &nan);
  return H5Id(h5_check(H5Dcreate2(loc, name.c_str(), H5T_NATIVE_DOUBLE, space.get(), H5P_DEFAULT, dcpl.get(),
                                  H5P_DEFAULT),
                       "H5Dcreate", name),
              H5Dclose);
}

}  // namespace

hid_t h5_check(hid_t rc, const char* what, const std::string& path) {
  if (rc < 0) throw core::RuntimeFault(std::string("HDF5 ") + what + " failed for " + path);
  return rc;
}

H5Id open_file(const std::string& path, MPI_Comm comm, bool append) {
  H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL);
  // Metadata reads and writes are collective: every rank makes the same calls.
  H5Pset_all_coll_metadata_ops(fapl.get(), true);
  H5Pset_coll_metadata_write(fapl.get(), true);
  hid_t id = append ? H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get())
                    : H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get());
  return H5Id(h5_check(id, append ? "H5Fopen" : "H5Fcreate", path), H5Fclose);
}

void flush(hid_t file) { h5_check(H5Fflush(file, H5F_SCOPE_GLOBAL), "H5Fflush", "file"); }

bool exists(hid_t loc, const std::string& path) {
  // H5Lexists checks one link at a time, so walk the path.
  std::string prefix;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    std::string part = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (!part.empty()) {
      prefix += (prefix.empty() ? "" : "/") + part;
      if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

H5Id create_group(hid_t loc, const std::string& path) {
  H5Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  return H5Id(h5_check(H5Gcreate2(loc, path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), "H5Gcreate", path),
              H5Gclose);
}

H5Id open_group(hid_t loc, const std::string& path) {
  return H5Id(h5_check(H5Gopen2(loc, path.c_str(), H5P_DEFAULT), "H5Gopen", path), H5Gclose);
}

void write_attr(hid_t obj, const std::string& name, const nlohmann::ordered_json& value) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  auto make = [&](hid_t type) {
    return H5Id(h5_check(H5Acreate2(obj, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         "H5Acreate", name),
                H5Aclose);
  };
  if (value.is_boolean()) {
    int8_t v = value.get<bool>() ? 1 : 0;
    H5Id a = make(H5T_NATIVE_INT8);
    H5Awrite(a.get(), H5T_NATIVE_INT8, &v);
  } else if (value.is_number_integer()) {
    int64_t v = value.get<int64_t>();
    H5Id a = make(H5T_NATIVE_INT64);
    H5Awrite(a.get(), H5T_NATIVE_INT64, &v);
  } else if (value.is_number()) {
    double v = value.get<double>();
    H5Id a = make(H5T_NATIVE_DOUBLE);
    H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &v);
  } else {
    std::string s = value.is_string() ? value.get<std::string>() : value.dump();
    H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), H5T_VARIABLE);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    H5Id a = make(type.get());
    const char* p = s.c_str();
    h5_check(H5Awrite(a.get(), type.get(), &p), "H5Awrite", name);
  }
}

void write_attrs(hid_t obj, const nlohmann::ordered_json& object) {
  for (const auto& [k, v] : object.items()) write_attr(obj, k, v);
}

H5Id string_type(std::size_t n) {
  H5Id t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), n);
  H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
  return t;
}

AppendTable::AppendTable(hid_t loc, const std::string& name, hid_t row_type, std::size_t row_bytes)
    : type_(row_type), row_bytes_(row_bytes) {
  hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED}, chunk[1] = {16};
  H5Id space(H5Screate_simple(1, dims, maxdims), H5Sclose);
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(dcpl.get(), 1, chunk);
  dset_ = H5Id(h5_check(H5Dcreate2(loc, name.c_str(), row_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                        "H5Dcreate", name),
               H5Dclose);
}

void AppendTable::append(const void* row, bool writer) {
  hsize_t dims[1] = {rows_ + 1};
  h5_check(H5Dset_extent(dset_.get(), dims), "H5Dset_extent", "table");
  H5Id fspace(H5Dget_space(dset_.get()), H5Sclose);
  hsize_t start[1] = {rows_}, count[1] = {1};
  H5Id mspace(H5Screate_simple(1, count, nullptr), H5Sclose);
  if (writer) {
    H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
  } else {
    H5Sselect_none(fspace.get());
    H5Sselect_none(mspace.get());
  }
  std::vector<std::byte> blank(row_bytes_);
  H5Id dxpl = collective_xfer();
  h5_check(H5Dwrite(dset_.get(), type_, mspace.get(), fspace.get(), dxpl.get(), writer ? row : blank.data()),
           "H5Dwrite", "table");
  ++rows_;
}

SampleCube::SampleCube(hid_t loc, const std::string& name, hsize_t iters, hsize_t ranks)
    : iters_(std::max<hsize_t>(iters, 1)), ranks_(ranks) {
  hsize_t dims[3] = {0, iters_, ranks_}, maxdims[3] = {H5S_UNLIMITED, H5S_UNLIMITED, ranks_},
          chunk[3] = {1, std::min<hsize_t>(iters_, 256), ranks_};
  H5Id space(H5Screate_simple(3, dims, maxdims), H5Sclose);
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(dcpl.get(), 3, chunk);
  double nan = std::numeric_limits<double>::quiet_NaN();
  H5Pset_fill_value(dcpl.get(), H5T_NATIVE_DOUBLE, &nan);
  dset_ = H5Id(h5_check(H5Dcreate2(loc, name.c_str(), H5T_NATIVE_DOUBLE, space.get(), H5P_DEFAULT, dcpl.get(),
                                   H5P_DEFAULT),
                        "H5Dcreate", name),
               H5Dclose);
}

void SampleCube::append(std::span<const double> mine, int rank) {
  auto n = static_cast<hsize_t>(mine.size());  // the same on every rank
  iters_ = std::max(iters_, n);
  hsize_t dims[3] = {rows_ + 1, iters_, ranks_};
  h5_check(H5Dset_extent(dset_.get(), dims), "H5Dset_extent", "samples");
  H5Id fspace(H5Dget_space(dset_.get()), H5Sclose);
  hsize_t start[3] = {rows_, 0, static_cast<hsize_t>(rank)}, count[3] = {1, n, 1};
  hsize_t mdims[1] = {std::max<hsize_t>(n, 1)};
  H5Id mspace(H5Screate_simple(1, mdims, nullptr), H5Sclose);
  if (n > 0) {
    H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
  } else {  // no valid iteration at this size (window timing): the row stays NaN
    H5Sselect_none(fspace.get());
    H5Sselect_none(mspace.get());
  }
  double none = 0;
  H5Id dxpl = collective_xfer();
  h5_check(H5Dwrite(dset_.get(), H5T_NATIVE_DOUBLE, mspace.get(), fspace.get(), dxpl.get(), n ? mine.data() : &none),
           "H5Dwrite", "samples");
  ++rows_;
}

AppendMatrix::AppendMatrix(hid_t loc, const std::string& name, hsize_t cols)
    : AppendMatrix(loc, name, std::vector<hsize_t>{cols}, 1) {}

AppendMatrix::AppendMatrix(hid_t loc, const std::string& name, std::vector<hsize_t> inner, hsize_t chunk_rows)
    : dset_(growing_f64(loc, name, inner, chunk_rows)), inner_(std::move(inner)) {
  cols_ = 1;
  for (hsize_t d : inner_) cols_ *= d;
}

void AppendMatrix::append(std::span<const double> row, bool writer) {
  std::vector<hsize_t> dims{rows_ + 1}, start{rows_}, count{1};
  for (hsize_t d : inner_) {
    dims.push_back(d);
    start.push_back(0);
    count.push_back(d);
  }
  h5_check(H5Dset_extent(dset_.get(), dims.data()), "H5Dset_extent", "matrix");
  H5Id fspace(H5Dget_space(dset_.get()), H5Sclose);
  H5Id mspace(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
  std::vector<double> blank(cols_, 0.0);
  if (writer && row.size() == cols_) {
    H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
  } else {
    H5Sselect_none(fspace.get());
    H5Sselect_none(mspace.get());
    writer = false;
  }
  H5Id dxpl = collective_xfer();
  h5_check(H5Dwrite(dset_.get(), H5T_NATIVE_DOUBLE, mspace.get(), fspace.get(), dxpl.get(),
                    writer ? row.data() : blank.data()),
           "H5Dwrite", "matrix");
  ++rows_;
}

void write_table(hid_t loc, const std::string& name, hid_t row_type, const void* rows, std::size_t n,
                 bool writer) {
  hsize_t dims[1] = {n};
  H5Id space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  H5Id dset(h5_check(H5Dcreate2(loc, name.c_str(), row_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     "H5Dcreate", name),
            H5Dclose);
  if (n == 0) return;
  H5Id mspace(H5Screate_simple(1, dims, nullptr), H5Sclose);
  H5Id fspace(H5Dget_space(dset.get()), H5Sclose);
  if (!writer) {
    H5Sselect_none(mspace.get());
    H5Sselect_none(fspace.get());
  }
  H5Id dxpl = collective_xfer();
  h5_check(H5Dwrite(dset.get(), row_type, mspace.get(), fspace.get(), dxpl.get(), rows), "H5Dwrite", name);
}

}  // namespace meshbench::results
