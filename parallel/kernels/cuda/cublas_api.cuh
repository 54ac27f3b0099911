// cuBLAS, opened with dlopen at the first GPU backend's construction instead of linked: loading
// libcublas.so (and the libcublasLt.so it needs) runs their static initialisers, about 0.33 s of
// CPU in every process that links them, GPU or not (step_bench --help took 0.54 s, 0.33 s of it
// in libcublasLt; every CPU run and every --plan-only paid it). The backend calls cuBLAS through
// this table, one entry per function it uses; adding a call means adding its entry.
// A missing or unloadable library is a clear error naming it, at the first CUDA backend.
// Not here: the calls themselves (backend_cuda.cu).
#pragma once

#include <cublas_v2.h>

#include "core/error.hpp"

namespace meshbench::parallel::cuda {

// cublasGemmEx and cublasGemmStridedBatchedEx have C++ overloads (cublas_api.h): the C entry
// points, spelt out.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                    const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                    const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                                  int, const void*, const void*, cudaDataType, int, long long int,
                                                  const void*, cudaDataType, int, long long int, const void*, void*,
                                                  cudaDataType, int, long long int, int, cublasComputeType_t,
                                                  cublasGemmAlgo_t);

struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSgemm_v2) sgemm;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
  GemmExFn gemm_ex;
  GemmStridedBatchedExFn gemm_strided_batched_ex;
  decltype(&cublasGetStatusString) status_string;
};

// The table, loaded once (thread-safe); throws std::runtime_error naming the library and
// dlerror() when libcublas.so.<major> or one of its functions is missing.
const CublasApi& cublas_api();

// The name dlopen is given: libcublas.so.<the toolkit's cuBLAS major version>.
const char* cublas_library();

}  // namespace meshbench::parallel::cuda

// A cuBLAS call's status checked as error.hpp's MB_CHECK_ forms are: on failure the statement,
// cuBLAS's error string, file, line, rank, host and group, and the job aborts (exit 3).
#define MB_CHECK_CUBLAS(stmt, group)                                                              \
  MB_CHECK_("cuBLAS", cublasStatus_t, CUBLAS_STATUS_SUCCESS,                                      \
            ::meshbench::parallel::cuda::cublas_api().status_string, #stmt, stmt, group)
