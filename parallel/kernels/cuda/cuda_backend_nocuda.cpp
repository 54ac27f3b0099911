// Built without the CUDA toolkit: the CUDA path reports itself unavailable and refuses.
#include <cmath>

#include "core/error.hpp"
#include "kernels/cuda/cuda_backend.hpp"

namespace meshbench::parallel::cuda {
namespace {
[[noreturn]] void no_cuda() {
  throw core::UsageError("--device cuda: meshbench was built without CUDA");
}
}  // namespace

bool available(std::string* why) {
  if (why) *why = "meshbench was built without CUDA";
  return false;
}
std::string open_cublas() { return "meshbench was built without CUDA"; }
std::string device_name(int) { return "none"; }
double device_memory_gib(int) { return NAN; }
std::unique_ptr<Backend<float>> make_backend(Precision, int) { no_cuda(); }
double datasheet_peak(const std::string&, Precision) { return NAN; }
std::vector<ParityRow> layer_parity(Precision, unsigned) { no_cuda(); }
GemmTiming measure_gemm_peak(int, int, int, Precision, int) { no_cuda(); }
std::string host_sync_in(Backend<float>&, const std::function<void()>&) { no_cuda(); }

}  // namespace meshbench::parallel::cuda
