// CUDA path against the CPU reference (ggml test-backend-ops style): every layer and one
// whole training step, by normalised error with a tolerance per op. Skipped without a GPU
// (here every CUDA call fails with error 35); scripts/gpu-check.sh runs it where one exists.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cuda/cuda_engine.hpp"

using namespace meshbench::parallel;

// A macro, not a function: GTEST_SKIP() returns from the function it is written in.
#define SKIP_WITHOUT_GPU()                                               \
  do {                                                                   \
    std::string why;                                                     \
    if (!cuda::available(&why)) GTEST_SKIP() << "no GPU: " << why;       \
  } while (0)

TEST(CudaParity, LayersFp32) {
  SKIP_WITHOUT_GPU();
  for (const auto& r : cuda::layer_parity(cuda::Precision::kFp32, 1))
    EXPECT_LT(r.rel_err, r.tolerance) << r.op;
}

TEST(CudaParity, LayersBf16) {
  SKIP_WITHOUT_GPU();
  for (const auto& r : cuda::layer_parity(cuda::Precision::kBf16, 2))
    EXPECT_LT(r.rel_err, r.tolerance) << r.op;
}

TEST(CudaParity, WholeStepFp32) {
  SKIP_WITHOUT_GPU();
  GptConfig c = preset("tiny");
  c.kv_heads = 2;
  c.tied = false;
  const auto rows = cuda::step_parity(c, cuda::Precision::kFp32, 3);
  ASSERT_FALSE(rows.empty());
  for (const auto& r : rows) EXPECT_LT(r.rel_err, r.tolerance) << r.op;
}

TEST(CudaParity, WholeStepBf16) {
  SKIP_WITHOUT_GPU();
  const auto rows = cuda::step_parity(preset("tiny"), cuda::Precision::kBf16, 4);
  ASSERT_FALSE(rows.empty());
  for (const auto& r : rows) EXPECT_LT(r.rel_err, r.tolerance) << r.op;
}

TEST(CudaParity, DatasheetPeakNeverDefaults) {
  EXPECT_TRUE(std::isnan(cuda::datasheet_peak("Some Unknown GPU", cuda::Precision::kBf16)));
}
