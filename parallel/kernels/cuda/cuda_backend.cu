// The CUDA backend's plain entry points (cuda_backend.hpp): availability, device facts and
// the per-op parity of the backend make_backend() makes.
#include <cuda_runtime.h>

#include <cmath>

#include "compute/device.hpp"
#include "core/error.hpp"
#include "kernels/cuda/cublas_api.cuh"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/datasheet.hpp"

namespace meshbench::parallel::cuda {

bool available(std::string* why) {
  const compute::GpuProbe p = compute::probe_gpus();
  if (p.state == compute::GpuState::kUsable) return true;
  if (why) *why = p.detail;
  return false;
}

std::string open_cublas() {
  try {
    (void)cublas_api();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string device_name(int device) { return compute::device_name(device); }

double device_memory_gib(int device) {
  if (!available(nullptr)) return NAN;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return NAN;
  return double(prop.totalGlobalMem) / double(1ull << 30);
}

double datasheet_peak(const std::string& name, Precision p) {
  const DatasheetEntry* e = datasheet_entry(name, device_memory_gib(0));
  if (e == nullptr) return NAN;
  return p == Precision::kFp32 ? e->fp32 : e->bf16;
}

std::vector<ParityRow> layer_parity(Precision p, unsigned seed) {
  const auto be = make_backend(p, 0);
  return parallel::layer_parity(*be, p, seed);
}

}  // namespace meshbench::parallel::cuda
