// The default attention's choice (issue 44, item 9; kernels/attention_choice.hpp): an explicit
// --attention always wins, the host's default is flash, and on a device the faster by the
// set-up timing, a tie or an unmeasurable naive going to flash. The timing itself runs on
// any backend: here the CPU's, by the host clock (the CUDA timing is CudaParity's).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/attention_choice.hpp"

using namespace meshbench::parallel;

namespace {
const double kNan = std::nan("");
}

TEST(AttentionChoice, AnExplicitFlagWinsOverAnyMeasurement) {
  EXPECT_FALSE(choose_attention("naive", true, {1e-3, 5e-3}).flash);
  EXPECT_TRUE(choose_attention("flash", true, {5e-3, 1e-3}).flash);
  EXPECT_EQ(choose_attention("naive", true, {1e-3, 5e-3}).rule, "--attention naive");
  EXPECT_EQ(choose_attention("flash", false, {kNan, kNan}).rule, "--attention flash");
}

TEST(AttentionChoice, TheHostDefaultIsFlashUnmeasured) {
  const AttentionChoice a = choose_attention("", false, {5e-3, 1e-3});
  EXPECT_TRUE(a.flash);
  EXPECT_EQ(a.rule, "default on the host (flash)");
}

TEST(AttentionChoice, OnADeviceTheFasterWins) {
  const AttentionChoice naive = choose_attention("", true, {2.5e-3, 1.25e-3});
  EXPECT_FALSE(naive.flash);
  EXPECT_EQ(naive.rule, "measured: the faster of flash 2.500 ms and naive 1.250 ms per layer forward + backward");
  EXPECT_TRUE(choose_attention("", true, {1.25e-3, 2.5e-3}).flash);
  EXPECT_TRUE(choose_attention("", true, {2e-3, 2e-3}).flash) << "a tie goes to flash (less memory)";
}

TEST(AttentionChoice, AnUnmeasurableSideLoses) {
  EXPECT_TRUE(choose_attention("", true, {3e-3, kNan}).flash) << "naive did not fit";
  EXPECT_FALSE(choose_attention("", true, {kNan, 3e-3}).flash) << "flash refused the shape";
  const AttentionChoice none = choose_attention("", true, {kNan, kNan});
  EXPECT_TRUE(none.flash);
  EXPECT_EQ(none.rule, "not measured: flash (the default)");
}

TEST(AttentionChoice, TheTimingMeasuresBothOnTheCpu) {
  const AttentionTimes t = time_attention(cpu_backend<float>(), 1, 16, 2, 1, 8, 2);
  EXPECT_TRUE(std::isfinite(t.flash_s) && t.flash_s >= 0);
  EXPECT_TRUE(std::isfinite(t.naive_s) && t.naive_s >= 0);
}
