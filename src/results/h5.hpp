// A small RAII layer over the HDF5 C API for the one process that writes a results file
// (world rank 0; the other ranks send it their rows): groups, attributes from JSON values,
// append-only tables and sample cubes, and MemFile, a file held in memory and published to
// disk whole (written beside, then renamed over the old one), so the file on disk is always
// a complete HDF5 file: the last published state, never a half-written one.
// Not here: what the datasets mean (results/README.md and the reporters), who may write the
// file (output_path.hpp), or any MPI.
#pragma once

#include <hdf5.h>

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

// Whether `path` is a file HDF5 can open (quietly; false for a missing or foreign file).
bool is_hdf5(const std::string& path);

// An HDF5 file held in memory (the core driver, no backing store). publish() writes the
// whole image to PATH.partial and renames it over PATH: the rename is atomic, so a reader,
// a crash or a full disk never sees a partial file. A failed publish removes PATH.partial and
// leaves PATH as the last publish made it.
class MemFile {
 public:
  // Loads PATH (append) or starts an empty file; nothing is written to disk until publish().
  MemFile(std::string path, bool load_existing);
  hid_t id() const { return file_.get(); }
  const std::string& path() const { return path_; }
  // Empty on success, else "<what> PATH: <strerror>" (for example "No space left on device").
  // `durable`: fdatasync the image before the rename (the last publish of a run).
  std::string publish(bool durable = false);
  double publish_seconds() const { return publish_s_; }  // all publishes so far
  int publishes() const { return publishes_; }
  std::size_t bytes() const { return image_.size(); }  // the last image published

 private:
  std::string path_;
  H5Id file_;
  std::vector<char> image_;
  double publish_s_ = 0;
  int publishes_ = 0;
};

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

// A 1-D table of compound rows, extended one row at a time.
class AppendTable {
 public:
  AppendTable(hid_t loc, const std::string& name, hid_t row_type);
  void append(const void* row);
  hsize_t rows() const { return rows_; }

 private:
  H5Id dset_;
  hid_t type_;
  hsize_t rows_ = 0;
};

// A float64 dataset [rows, iters, ranks], extended one row at a time from every rank's
// samples ([iter][rank], iteration-major). A row may hold more iterations than the ones
// before it: the iters dimension then grows (from `iters` at creation), and cells a row did
// not fill read as NaN.
class SampleCube {
 public:
  SampleCube(hid_t loc, const std::string& name, hsize_t iters, hsize_t ranks);
  void append(std::span<const double> by_iter_rank);

 private:
  H5Id dset_;
  hsize_t iters_, ranks_, rows_ = 0;
};

// A float64 dataset [rows, inner...] ([rows, cols] for a matrix; [rows] when inner is empty),
// extended one row at a time (the product of inner elements). NaN fill.
class AppendMatrix {
 public:
  AppendMatrix(hid_t loc, const std::string& name, hsize_t cols);
  AppendMatrix(hid_t loc, const std::string& name, std::vector<hsize_t> inner, hsize_t chunk_rows);
  void append(std::span<const double> row);

 private:
  H5Id dset_;
  std::vector<hsize_t> inner_;
  hsize_t cols_ = 1, rows_ = 0;
};

// Writes a whole 1-D compound table of `n` rows at once (an empty one when n is 0).
void write_table(hid_t loc, const std::string& name, hid_t row_type, const void* rows, std::size_t n);

}  // namespace meshbench::results
