// Host BLAS (OpenBLAS through CBLAS) behind one typed, row-major GEMM.
// gemm<float> is cblas_sgemm and gemm<double> cblas_dgemm, so the step engine's layers can be
// instantiated in float64 for gradient checks with the same code path. This is deliberately
// not a general BLAS binding: only what the engine and its benchmarks call.
#pragma once

#include <string>

namespace meshbench::compute {

enum class Trans { kNo, kYes };

// C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C, all row-major, leading
// dimensions in elements (the row stride, so column slices of a wider matrix need no copy).
template <typename T>
void gemm(Trans ta, Trans tb, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
          int ldb, T beta, T* C, int ldc);

// OpenBLAS's own thread count (its pthread pool, separate from OpenMP's).
int blas_threads();
void set_blas_threads(int n);

// Runs a scope with OpenBLAS at one thread (for GEMMs issued from inside an OpenMP loop),
// restoring the previous count on exit.
class BlasSingleThreaded {
 public:
  BlasSingleThreaded() : saved_(blas_threads()) {
    if (saved_ != 1) set_blas_threads(1);
  }
  ~BlasSingleThreaded() {
    if (saved_ != 1) set_blas_threads(saved_);
  }
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;

 private:
  int saved_;
};

}  // namespace meshbench::compute
