// Device API over the CUDA runtime. A CUDA call that fails after a device was found is a
// runtime fault (exit 3) naming the call; "no device" (error 35/100 on a GPU-less machine)
// is reported as zero devices so callers can skip or refuse.
#include <cuda_runtime.h>

#include <string>

#include "compute/device.hpp"
#include "core/error.hpp"

#define MB_CHECK_CUDA(stmt)                                                               \
  do {                                                                                    \
    cudaError_t mb_err_ = (stmt);                                                         \
    if (mb_err_ != cudaSuccess)                                                           \
      ::meshbench::core::check_failed("CUDA", #stmt, cudaGetErrorString(mb_err_), "-",     \
                                      __FILE__, __LINE__);                                \
  } while (0)

namespace meshbench::compute {

bool built_with_cuda() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "unknown";
  return prop.name;
}

std::string cuda_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

void set_device(int index) { MB_CHECK_CUDA(cudaSetDevice(index)); }

void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  MB_CHECK_CUDA(cudaMalloc(&p, bytes));
  MB_CHECK_CUDA(cudaMemset(p, 0, bytes));
  return p;
}

void device_free(void* p) noexcept { (void)cudaFree(p); }

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  MB_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  MB_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void stream_synchronize(void* stream) {
  MB_CHECK_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

}  // namespace meshbench::compute
