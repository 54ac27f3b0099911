// The datasheet table matches a GPU only by exact name and memory size (issue 17, defect 9).
#include <gtest/gtest.h>

#include "kernels/datasheet.hpp"

using namespace meshbench::parallel;

TEST(Datasheet, ExactNameAndMemory) {
  const DatasheetEntry* h200 = datasheet_entry("NVIDIA H200", 139.8);
  ASSERT_NE(h200, nullptr);
  EXPECT_DOUBLE_EQ(h200->bf16, 989.4e12);
  const DatasheetEntry* nvl = datasheet_entry("NVIDIA H200 NVL", 139.8);
  ASSERT_NE(nvl, nullptr);
  EXPECT_DOUBLE_EQ(nvl->bf16, 835.5e12);
  EXPECT_EQ(datasheet_entry("NVIDIA H200", 79.0), nullptr);   // memory outside the range
  EXPECT_EQ(datasheet_entry("H200", 139.8), nullptr);         // not the exact name
  EXPECT_EQ(datasheet_entry("NVIDIA H200 NVL-X", 139.8), nullptr);
  EXPECT_EQ(datasheet_entry("Some Unknown GPU", 16), nullptr);
  EXPECT_NE(describe_datasheet("NVIDIA H200", 139.8).find("989.4"), std::string::npos);
  EXPECT_NE(describe_datasheet("H200", 139.8).find("no datasheet entry"), std::string::npos);
}
