// OpenBLAS CBLAS calls for compute/blas.hpp.
#include "compute/blas.hpp"

#include <cblas.h>

#include "core/op_watch.hpp"

namespace meshbench::compute {

namespace {
CBLAS_TRANSPOSE cb(Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; }
}  // namespace

template <>
void gemm<float>(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, cb(ta), cb(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  core::note_progress();  // the watchdog's evidence that compute moves (core/op_watch.hpp)
}

template <>
void gemm<double>(Trans ta, Trans tb, int M, int N, int K, double alpha, const double* A,
                  int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, cb(ta), cb(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  core::note_progress();
}

int blas_threads() { return openblas_get_num_threads(); }
void set_blas_threads(int n) { openblas_set_num_threads(n); }

}  // namespace meshbench::compute
