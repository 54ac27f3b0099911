// The CUDA path's plain entry points (cuda_engine.hpp): availability, device facts, parity
// of the CUDA backend, and the timed step loop, all over Gpt<float> with make_backend().
#include <cuda_runtime.h>

#include <cmath>

#include "compute/device.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "kernels/cuda/cuda_engine.hpp"
#include "kernels/datasheet.hpp"

namespace meshbench::parallel::cuda {

bool available(std::string* why) {
  const compute::GpuProbe p = compute::probe_gpus();
  if (p.state == compute::GpuState::kUsable) return true;
  if (why) *why = p.detail;
  return false;
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

std::vector<ParityRow> step_parity(const GptConfig& cfg, Precision p, unsigned seed) {
  const auto be = make_backend(p, 0);
  return parallel::step_parity(cfg, *be, p, seed);
}

GpuStepTimes run_steps(const GptConfig& cfg, Precision p, int warmup, int steps, unsigned seed,
                       const GpuRunOptions& opt) {
  const auto be = make_backend(p, opt.device);
  GpuStepTimes out;
  {
    Gpt<float> model(cfg, *be);  // destroyed before the backend that owns its buffers
    model.init_weights(seed);
    std::vector<int32_t> tok(size_t(cfg.tokens())), tgt(tok.size());
    const double t_origin = core::now_seconds();
    for (int s = 0; s < warmup + steps; ++s) {
      if (opt.time_limit_s > 0 && core::now_seconds() - t_origin > opt.time_limit_s) {
        out.timed_out = true;
        break;
      }
      synthetic_batch(tok.data(), tgt.data(), opt.data, seed, s, 0, cfg.micro_batch, cfg.seq,
                      cfg.vocab);
      be->synchronize();
      const double t0 = core::now_seconds();
      model.zero_grad();
      const float loss = model.forward(tok.data(), tgt.data());  // reads the loss: synchronises
      const double t1 = core::now_seconds();
      model.backward();
      be->synchronize();
      const double t2 = core::now_seconds();
      model.update(opt.adam, s + 1);
      be->synchronize();
      const double t3 = core::now_seconds();
      if (s < warmup) continue;
      out.step.push_back(t3 - t0);
      out.forward.push_back(t1 - t0);
      out.backward.push_back(t2 - t1);
      out.optimizer.push_back(t3 - t2);
      out.loss.push_back(loss);
    }
  }
  return out;
}

}  // namespace meshbench::parallel::cuda
