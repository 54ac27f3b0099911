// Tests of src/results/h5.hpp's Compound, the one way row structs get an HDF5 type: the
// type's size is the struct's, the columns keep the order they were added in, each at its
// member's offset with the HDF5 type of its C++ type, and rows written with it read back.
// No file on disk: MemFile holds the file in memory until a publish, which never comes here.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "results/h5.hpp"

namespace meshbench::results {
namespace {

struct Row {
  std::int32_t a;
  char name[12];
  std::uint8_t flag;
  double x;
  std::int64_t big;
  std::uint64_t u;
  std::int8_t s;
  double arr[3];
};

Compound<Row> row_type() {
  Compound<Row> t;
  t.add("a", &Row::a).add("name", &Row::name).add("flag", &Row::flag).add("x", &Row::x);
  t.add("big", &Row::big).add("u", &Row::u).add("s", &Row::s).add("arr_1", &Row::arr, 1);
  return t;
}

std::string member_name(hid_t t, unsigned i) {
  char* n = H5Tget_member_name(t, i);
  std::string s = n;
  H5free_memory(n);
  return s;
}

bool member_is(hid_t t, unsigned i, hid_t native) {
  H5Id m(H5Tget_member_type(t, i), H5Tclose);
  return H5Tequal(m.get(), native) > 0;
}

TEST(Compound, ColumnsInOrderAtTheirOffsets) {
  Compound<Row> t = row_type();
  EXPECT_EQ(H5Tget_size(t.id()), sizeof(Row));
  ASSERT_EQ(H5Tget_nmembers(t.id()), 8);
  const char* names[] = {"a", "name", "flag", "x", "big", "u", "s", "arr_1"};
  const std::size_t offsets[] = {offsetof(Row, a), offsetof(Row, name), offsetof(Row, flag), offsetof(Row, x),
                                 offsetof(Row, big), offsetof(Row, u), offsetof(Row, s),
                                 offsetof(Row, arr) + sizeof(double)};
  for (unsigned i = 0; i < 8; ++i) {
    EXPECT_EQ(member_name(t.id(), i), names[i]);
    EXPECT_EQ(H5Tget_member_offset(t.id(), i), offsets[i]) << names[i];
  }
  EXPECT_TRUE(member_is(t.id(), 0, H5T_NATIVE_INT32));
  EXPECT_TRUE(member_is(t.id(), 2, H5T_NATIVE_UINT8));
  EXPECT_TRUE(member_is(t.id(), 3, H5T_NATIVE_DOUBLE));
  EXPECT_TRUE(member_is(t.id(), 4, H5T_NATIVE_INT64));
  EXPECT_TRUE(member_is(t.id(), 5, H5T_NATIVE_UINT64));
  EXPECT_TRUE(member_is(t.id(), 6, H5T_NATIVE_INT8));
  EXPECT_TRUE(member_is(t.id(), 7, H5T_NATIVE_DOUBLE));
  H5Id str(H5Tget_member_type(t.id(), 1), H5Tclose);  // char[12]: fixed, NUL-padded, 12 bytes
  EXPECT_EQ(H5Tget_class(str.get()), H5T_STRING);
  EXPECT_EQ(H5Tget_size(str.get()), 12u);
  EXPECT_EQ(H5Tget_strpad(str.get()), H5T_STR_NULLPAD);
}

TEST(Compound, RowsReadBack) {
  MemFile file("/nonexistent/compound_test.h5", false);  // in memory; never published
  Compound<Row> t = row_type();
  std::vector<Row> rows(2, Row{});
  rows[0].a = -7;
  put_fixed(rows[0].name, "all_reduce");
  rows[0].flag = 1;
  rows[0].x = 0.25;
  rows[0].big = -(std::int64_t{1} << 40);
  rows[1].u = ~std::uint64_t{0};
  rows[1].s = -3;
  rows[1].arr[1] = 2.5;
  write_table(file.id(), "rows", t.id(), rows.data(), rows.size());

  H5Id dset(H5Dopen2(file.id(), "rows", H5P_DEFAULT), H5Dclose);
  std::vector<Row> back(2, Row{});
  ASSERT_GE(H5Dread(dset.get(), t.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()), 0);
  EXPECT_EQ(back[0].a, -7);
  EXPECT_EQ(std::string(back[0].name), "all_reduce");
  EXPECT_EQ(back[0].flag, 1);
  EXPECT_EQ(back[0].x, 0.25);
  EXPECT_EQ(back[0].big, -(std::int64_t{1} << 40));
  EXPECT_EQ(back[1].u, ~std::uint64_t{0});
  EXPECT_EQ(back[1].s, -3);
  EXPECT_EQ(back[1].arr[1], 2.5);
  EXPECT_EQ(back[1].arr[0], 0.0);  // not a column: never written, left as initialised
}

}  // namespace
}  // namespace meshbench::results
