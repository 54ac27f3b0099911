// Device API over the CUDA runtime. A CUDA call that fails after a device was found is a
// runtime fault (exit 3) naming the call (MB_CHECK_CUDA, core/error.hpp). probe_gpus()
// tells "no GPU here" (no NVIDIA driver, or the driver sees no device: skip) from "a GPU
// CUDA cannot use" (a driver too old for this runtime, a broken install: fail, saying which).
// Host<->device copies are queued on a stream and complete before they return, so a
// communicator or compute stream that runs after them reads the data (issue 17, defect 2).
// Not here: kernels, cuBLAS (parallel/kernels/cuda/), NCCL (comm/nccl_comm.cu).
#include <cuda_runtime.h>

#include <string>

#include <fmt/core.h>

#include "compute/device.hpp"
#include "core/error.hpp"

namespace meshbench::compute {
namespace {
std::string version_text(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }
}  // namespace

bool built_with_cuda() { return true; }

GpuProbe probe_gpus() {
  GpuProbe p;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) {
    p.state = GpuState::kUsable;
    p.count = n;
    p.detail = fmt::format("{} CUDA device(s)", n);
    return p;
  }
  (void)cudaGetLastError();  // clear the error the failed call left behind
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);  // 0 when no NVIDIA driver is installed
  (void)cudaRuntimeGetVersion(&runtime);
  const std::string err = e == cudaSuccess
                              ? std::string("no CUDA device")
                              : fmt::format("CUDA error {} ({}): {}", int(e), cudaGetErrorName(e),
                                            cudaGetErrorString(e));
  if (e == cudaSuccess || e == cudaErrorNoDevice || driver == 0) {
    p.state = GpuState::kAbsent;
    p.detail = driver == 0 ? fmt::format("no NVIDIA driver on this machine ({})", err) : err;
  } else {
    p.state = GpuState::kUnusable;
    p.detail = fmt::format("a GPU driver is present but CUDA cannot use it: {}; the driver "
                           "supports CUDA {}, this build's runtime is CUDA {}",
                           err, version_text(driver), version_text(runtime));
  }
  return p;
}

int device_count() {
  const GpuProbe p = probe_gpus();
  return p.state == GpuState::kUsable ? p.count : 0;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "unknown";
  return prop.name;
}

std::string cuda_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "none";
  return version_text(v);
}

void set_device(int index) { MB_CHECK_CUDA(cudaSetDevice(index), "-"); }

std::size_t device_memory_free() {
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return free;
}

void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  MB_CHECK_CUDA(cudaMalloc(&p, bytes), "-");
  MB_CHECK_CUDA(cudaMemset(p, 0, bytes), "-");
  MB_CHECK_CUDA(cudaDeviceSynchronize(), "-");  // the memset is done before any stream uses p
  return p;
}

void device_free(void* p) noexcept { (void)cudaFree(p); }

// A pageable cudaMemcpy may return before the data lands on the device, and the legacy
// stream does not order against non-blocking streams (NCCL's): queue the copy, then wait.
void copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  MB_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "-");
  MB_CHECK_CUDA(cudaStreamSynchronize(s), "-");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  MB_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "-");
  MB_CHECK_CUDA(cudaStreamSynchronize(s), "-");
}

void stream_synchronize(void* stream) {
  MB_CHECK_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "-");
}

}  // namespace meshbench::compute
