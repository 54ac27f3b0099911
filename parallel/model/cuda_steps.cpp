#include "model/cuda_steps.hpp"

#include "core/timer.hpp"
#include "model/step_parity.hpp"

namespace meshbench::parallel::cuda {

std::vector<ParityRow> step_parity(const GptConfig& cfg, Precision p, unsigned seed, bool flash) {
  const auto be = make_backend(p, 0);
  return parallel::step_parity(cfg, *be, p, seed, flash);
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
