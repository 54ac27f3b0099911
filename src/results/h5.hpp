// A small RAII layer over the parallel HDF5 C API: files opened with MPI-IO on a
// communicator, groups, attributes from JSON values, and append-only tables whose rows are
// written collectively (one writer for shared rows, every rank for its own column).
// Not here: what the datasets mean (see results/README.md and the reporters).
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace meshbench::results {

// An owned hid_t with its matching close function.
class H5Id {
 public:
  H5Id() = default;
  H5Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Id() { reset(); }
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  hid_t get() const { return id_; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// Throws core::RuntimeFault naming the HDF5 call when `rc` is negative.
hid_t h5_check(hid_t rc, const char* what, const std::string& path);

// Opens (append) or creates `path` on every rank of `comm` with the MPI-IO driver.
H5Id open_file(const std::string& path, MPI_Comm comm, bool append);
void flush(hid_t file);
bool exists(hid_t loc, const std::string& path);
H5Id create_group(hid_t loc, const std::string& path);  // intermediate groups too
H5Id open_group(hid_t loc, const std::string& path);

// Attributes: strings as variable-length UTF-8, integers as int64, reals as double, bools
// as int8 0/1, arrays and objects as their JSON text. Overwrites an existing attribute.
void write_attr(hid_t obj, const std::string& name, const nlohmann::ordered_json& value);
void write_attrs(hid_t obj, const nlohmann::ordered_json& object);

// Copies `s` into a fixed-length, NUL-padded field of a compound row (cut at N bytes).
template <std::size_t N>
void put_fixed(char (&dst)[N], const std::string& s) {
  std::memset(dst, 0, N);
  std::memcpy(dst, s.data(), std::min(N, s.size()));
}

// A fixed-length, NUL-padded string type of `n` bytes for compound tables.
H5Id string_type(std::size_t n);

// A 1-D table of compound rows, extended one row at a time. All ranks call append();
// only the rank with `writer` true supplies the row.
class AppendTable {
 public:
  AppendTable(hid_t loc, const std::string& name, hid_t row_type, std::size_t row_bytes);
  void append(const void* row, bool writer);
  hsize_t rows() const { return rows_; }

 private:
  H5Id dset_;
  hid_t type_;
  std::size_t row_bytes_;
  hsize_t rows_ = 0;
};

// A float64 dataset [rows, iters, ranks], extended one row at a time; every rank writes
// its own column of each row. A row may hold more iterations than the ones before it: the
// iters dimension then grows (from `iters` at creation), and cells a row did not fill read
// as NaN.
class SampleCube {
 public:
  SampleCube(hid_t loc, const std::string& name, hsize_t iters, hsize_t ranks);
  void append(std::span<const double> mine, int rank);

 private:
  H5Id dset_;
  hsize_t iters_, ranks_, rows_ = 0;
};

// A float64 dataset [rows, inner...] ([rows, cols] for a matrix; [rows] when inner is empty),
// extended one row at a time; one writer supplies each row (product of inner elements), the
// other ranks take part in the collective write with nothing. NaN fill.
class AppendMatrix {
 public:
  AppendMatrix(hid_t loc, const std::string& name, hsize_t cols);
  AppendMatrix(hid_t loc, const std::string& name, std::vector<hsize_t> inner, hsize_t chunk_rows);
  void append(std::span<const double> row, bool writer);

 private:
  H5Id dset_;
  std::vector<hsize_t> inner_;
  hsize_t cols_ = 1, rows_ = 0;
};

// Writes a whole 1-D compound table at once from rank 0's rows (other ranks pass any rows;
// only rank 0's are written).
void write_table(hid_t loc, const std::string& name, hid_t row_type, const void* rows, std::size_t n,
                 bool writer);

}  // namespace meshbench::results
