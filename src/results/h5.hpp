// A small RAII layer over the HDF5 C API for the one process that writes a results file
// (world rank 0; the other ranks send it their rows): groups, attributes from JSON values,
// compound row types, append-only tables and sample cubes, and MemFile, a file held in memory
// and published to disk whole (written beside, then renamed over the old one), so the file on
// disk is always a complete HDF5 file: the last published state, never a half-written one.
// Not here: what the datasets mean (docs/results.md and the reporters), who may write the
// file (output_path.hpp), or any MPI.
#pragma once

#include <hdf5.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
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

// The HDF5 row type of a plain struct, one column per member added, in the order added (the
// file's column order), sized sizeof(Row). The one way rows get a compound type:
//   Compound<SizeRow> t;
//   t.add("bytes", &SizeRow::bytes).add("dtype", &SizeRow::dtype);
//   t.add("t_median_max", &SizeRow::t_by_stat, 0);  // element 0 of an array member
//   AppendTable table(group, "sizes", t.id());      // t must outlive the table
// Members: double, int8/uint8, int32, int64 and uint64 as the native types, char[N] as a
// fixed-length NUL-padded string of N bytes (put_fixed fills it). Another type does not compile.
template <typename Row>
class Compound {
 public:
  Compound() : type_(h5_check(H5Tcreate(H5T_COMPOUND, sizeof(Row)), "H5Tcreate", "compound row"), H5Tclose) {}
  template <typename T>
  Compound& add(const char* name, T Row::*member) {
    return insert(name, offset_of(member), member_type<T>());
  }
  template <typename T, std::size_t N>
  Compound& add(const char* name, T (Row::*array)[N], std::size_t i) {
    return insert(name, offset_of(array) + i * sizeof(T), member_type<T>());
  }
  hid_t id() const { return type_.get(); }

 private:
  template <typename T>
  static std::size_t offset_of(T Row::*member) {
    const Row probe{};
    return static_cast<std::size_t>(reinterpret_cast<const char*>(&(probe.*member)) -
                                    reinterpret_cast<const char*>(&probe));
  }
  template <typename T>
  static H5Id member_type() {
    if constexpr (std::is_array_v<T> && std::is_same_v<std::remove_extent_t<T>, char>) return string_type(std::extent_v<T>);
    else if constexpr (std::is_same_v<T, double>) return H5Id(H5T_NATIVE_DOUBLE, nullptr);  // not ours to close
    else if constexpr (std::is_same_v<T, std::int8_t>) return H5Id(H5T_NATIVE_INT8, nullptr);
    else if constexpr (std::is_same_v<T, std::uint8_t>) return H5Id(H5T_NATIVE_UINT8, nullptr);
    else if constexpr (std::is_same_v<T, std::int32_t>) return H5Id(H5T_NATIVE_INT32, nullptr);
    else if constexpr (std::is_same_v<T, std::int64_t>) return H5Id(H5T_NATIVE_INT64, nullptr);
    else if constexpr (std::is_same_v<T, std::uint64_t>) return H5Id(H5T_NATIVE_UINT64, nullptr);
    else static_assert(sizeof(T) == 0, "Compound: no HDF5 column type for this member type");
  }
  Compound& insert(const char* name, std::size_t offset, const H5Id& type) {
    h5_check(H5Tinsert(type_.get(), name, offset, type.get()), "H5Tinsert", name);
    return *this;
  }

  H5Id type_;
};

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
