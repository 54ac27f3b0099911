// Built without the CUDA toolkit: the CUDA path reports itself unavailable.
#include <cmath>

#include "core/error.hpp"
#include "cuda/cuda_engine.hpp"

namespace meshbench::parallel::cuda {

bool available(std::string* why) {
  if (why) *why = "meshbench was built without CUDA";
  return false;
}
std::string device_name() { return "none"; }
double datasheet_peak(const std::string&, Precision) { return NAN; }
std::vector<ParityRow> layer_parity(Precision, unsigned) {
  throw core::UsageError("--device cuda: meshbench was built without CUDA");
}
std::vector<ParityRow> step_parity(const GptConfig&, Precision, unsigned) {
  throw core::UsageError("--device cuda: meshbench was built without CUDA");
}
double measure_gemm_peak(int, int, int, Precision) {
  throw core::UsageError("--device cuda: meshbench was built without CUDA");
}
GpuStepTimes run_steps(const GptConfig&, Precision, int, int, unsigned) {
  throw core::UsageError("--device cuda: meshbench was built without CUDA");
}

}  // namespace meshbench::parallel::cuda
