#include "kernels/cuda/cublas_api.cuh"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

#define MB_STR2(x) #x
#define MB_STR(x) MB_STR2(x)

namespace meshbench::parallel::cuda {

const char* cublas_library() { return "libcublas.so." MB_STR(CUBLAS_VER_MAJOR); }

namespace {

template <typename F>
void resolve(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr)
    throw std::runtime_error(std::string(cublas_library()) + " has no " + name + ": " + dlerror());
}

CublasApi load() {
  void* lib = dlopen(cublas_library(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr)
    throw std::runtime_error(std::string("cannot load cuBLAS (") + cublas_library() + ", the CUDA backend's GEMMs): " +
                             dlerror() + "; put the CUDA toolkit's lib folder on LD_LIBRARY_PATH");
  CublasApi a{};
  resolve(lib, a.create, "cublasCreate_v2");
  resolve(lib, a.destroy, "cublasDestroy_v2");
  resolve(lib, a.set_stream, "cublasSetStream_v2");
  resolve(lib, a.set_math_mode, "cublasSetMathMode");
  resolve(lib, a.sgemm, "cublasSgemm_v2");
  resolve(lib, a.sgemm_strided_batched, "cublasSgemmStridedBatched");
  resolve(lib, a.gemm_ex, "cublasGemmEx");
  resolve(lib, a.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
  resolve(lib, a.status_string, "cublasGetStatusString");
  return a;  // the library stays open for the process's life
}

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = load();
  return api;
}

}  // namespace meshbench::parallel::cuda
