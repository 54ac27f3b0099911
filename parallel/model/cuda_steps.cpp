#include "model/cuda_steps.hpp"

#include "model/step_parity.hpp"

namespace meshbench::parallel::cuda {

std::vector<ParityRow> step_parity(const GptConfig& cfg, Precision p, unsigned seed, bool flash) {
  const auto be = make_backend(p, 0);
  return parallel::step_parity(cfg, *be, p, seed, flash);
}

}  // namespace meshbench::parallel::cuda
