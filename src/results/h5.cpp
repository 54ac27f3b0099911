#include "results/h5.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace meshbench::results {
namespace {

// HDF5's automatic error stack printing, off for the scope (probes that may fail by design).
class QuietH5 {
 public:
  QuietH5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietH5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

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

// One hyperslab write of `mem` (count elements of `type`) at `start` of dset.
void write_at(hid_t dset, hid_t type, const std::vector<hsize_t>& start, const std::vector<hsize_t>& count,
              const void* mem, const std::string& what) {
  H5Id fspace(H5Dget_space(dset), H5Sclose);
  H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
  H5Id mspace(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
  h5_check(H5Dwrite(dset, type, mspace.get(), fspace.get(), H5P_DEFAULT, mem), "H5Dwrite", what);
}

// Writes all of `data` to a new file at `path`; "" or "<call> <path>: <strerror>".
std::string write_whole(const std::string& path, const std::vector<char>& data, bool durable) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create " + path + ": " + std::strerror(errno);
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : ENOSPC;
      ::close(fd);
      return "cannot write " + path + ": " + std::strerror(e);
    }
    done += static_cast<std::size_t>(n);
  }
  if (durable && ::fdatasync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    return "cannot sync " + path + ": " + std::strerror(e);
  }
  if (::close(fd) != 0) return "cannot write " + path + ": " + std::strerror(errno);  // NFS reports here
  return "";
}

}  // namespace

hid_t h5_check(hid_t rc, const char* what, const std::string& path) {
  if (rc < 0) throw core::RuntimeFault(std::string("HDF5 ") + what + " failed for " + path);
  return rc;
}

bool is_hdf5(const std::string& path) {
  QuietH5 quiet;
  return H5Fis_hdf5(path.c_str()) > 0;
}

MemFile::MemFile(std::string path, bool load_existing) : path_(std::move(path)) {
  H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl.get(), std::size_t{1} << 20, /*backing_store=*/0);
  // With no backing store, create does not touch PATH on disk; open reads it in once.
  const hid_t id = load_existing ? H5Fopen(path_.c_str(), H5F_ACC_RDWR, fapl.get())
                                 : H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  file_ = H5Id(h5_check(id, load_existing ? "H5Fopen" : "H5Fcreate", path_), H5Fclose);
}

std::string MemFile::publish(bool durable) {
  const double t0 = core::now_seconds();
  h5_check(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), "H5Fflush", path_);
  const ssize_t n = H5Fget_file_image(file_.get(), nullptr, 0);
  if (n < 0) throw core::RuntimeFault("HDF5 H5Fget_file_image failed for " + path_);
  image_.resize(static_cast<std::size_t>(n));
  if (H5Fget_file_image(file_.get(), image_.data(), image_.size()) != n)
    throw core::RuntimeFault("HDF5 H5Fget_file_image failed for " + path_);
  const std::string partial = path_ + ".partial";
  std::string err = write_whole(partial, image_, durable);
  if (err.empty() && std::rename(partial.c_str(), path_.c_str()) != 0)
    err = "cannot rename " + partial + " to " + path_ + ": " + std::strerror(errno);
  if (!err.empty()) std::remove(partial.c_str());  // frees the space the partial took
  publish_s_ += core::now_seconds() - t0;
  ++publishes_;
  return err;
}

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

AppendTable::AppendTable(hid_t loc, const std::string& name, hid_t row_type) : type_(row_type) {
  hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED}, chunk[1] = {16};
  H5Id space(H5Screate_simple(1, dims, maxdims), H5Sclose);
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(dcpl.get(), 1, chunk);
  dset_ = H5Id(h5_check(H5Dcreate2(loc, name.c_str(), row_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                        "H5Dcreate", name),
               H5Dclose);
}

void AppendTable::append(const void* row) {
  hsize_t dims[1] = {rows_ + 1};
  h5_check(H5Dset_extent(dset_.get(), dims), "H5Dset_extent", "table");
  write_at(dset_.get(), type_, {rows_}, {1}, row, "table");
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

void SampleCube::append(std::span<const double> by_iter_rank) {
  const hsize_t n = by_iter_rank.size() / ranks_;  // iterations of this row
  iters_ = std::max(iters_, n);
  hsize_t dims[3] = {rows_ + 1, iters_, ranks_};
  h5_check(H5Dset_extent(dset_.get(), dims), "H5Dset_extent", "samples");
  // No valid iteration at this size (window timing): the row stays NaN.
  if (n > 0) write_at(dset_.get(), H5T_NATIVE_DOUBLE, {rows_, 0, 0}, {1, n, ranks_}, by_iter_rank.data(), "samples");
  ++rows_;
}

AppendMatrix::AppendMatrix(hid_t loc, const std::string& name, hsize_t cols)
    : AppendMatrix(loc, name, std::vector<hsize_t>{cols}, 1) {}

AppendMatrix::AppendMatrix(hid_t loc, const std::string& name, std::vector<hsize_t> inner, hsize_t chunk_rows)
    : dset_(growing_f64(loc, name, inner, chunk_rows)), inner_(std::move(inner)) {
  cols_ = 1;
  for (hsize_t d : inner_) cols_ *= d;
}

void AppendMatrix::append(std::span<const double> row) {
  std::vector<hsize_t> dims{rows_ + 1}, start{rows_}, count{1};
  for (hsize_t d : inner_) {
    dims.push_back(d);
    start.push_back(0);
    count.push_back(d);
  }
  h5_check(H5Dset_extent(dset_.get(), dims.data()), "H5Dset_extent", "matrix");
  if (row.size() == cols_) write_at(dset_.get(), H5T_NATIVE_DOUBLE, start, count, row.data(), "matrix");
  ++rows_;  // a row of another length stays NaN
}

void write_table(hid_t loc, const std::string& name, hid_t row_type, const void* rows, std::size_t n) {
  hsize_t dims[1] = {n};
  H5Id space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  H5Id dset(h5_check(H5Dcreate2(loc, name.c_str(), row_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     "H5Dcreate", name),
            H5Dclose);
  if (n > 0) h5_check(H5Dwrite(dset.get(), row_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows), "H5Dwrite", name);
}

}  // namespace meshbench::results
