// One whole training step of Gpt<float> over a backend against the CPU float32 reference
// (kernels/parity.hpp has the per-op parity, the tolerances and the rules).
#pragma once

#include <vector>

#include "kernels/backend.hpp"
#include "kernels/parity.hpp"
#include "common/config.hpp"

namespace meshbench::parallel {

// One step (forward with logits, backward, AdamW step 1) of Gpt<float>(cfg, be) against
// Gpt<float>(cfg, cpu) from the same weights (init_weights(seed)) and tokens: rows loss,
// logits, grads, updated_params. flash: the backend's model runs --attention flash (the
// reference keeps the materialised attention).
std::vector<ParityRow> step_parity(const GptConfig& cfg, Backend<float>& be, Precision p,
                                   unsigned seed, bool flash = false);

}  // namespace meshbench::parallel
