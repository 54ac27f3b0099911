// Backend parity against the CPU float32 reference, in the manner of ggml's
// test-backend-ops: every op of a Backend<float> on random data, and one whole training step
// of Gpt<float> over it, each output compared by normalised error ||x - ref|| / ||ref||
// against a tolerance per op and precision (the whole step: model/step_parity.hpp). The same
// functions check the CUDA backend on a
// GPU and, here, the host emulation of its algorithm (backend_emulated.hpp).
// Not here: choosing a backend (cuda/cuda_backend.hpp), gradient checks against float64
// (tests/parallel/layers_gradcheck_test.cpp).
//
// Tolerances (parity_tolerance):
// - fp32: accumulation order alone separates a device from the CPU: 1e-5 per op, 1e-4 for
//   the attention backward and the whole-step gradients (several GEMMs deep).
// - bf16: three times the largest error the bf16 emulation showed over seeds 1-8 (the
//   measured values sit beside each entry in parity.cpp; a CPU test re-measures them and
//   fails if one leaves [tolerance / 10, tolerance / 2]). Ops without a GEMM keep fp32's.
// - updated_params, both precisions: the backend's parameters after AdamW step 1 against
//   the CPU AdamW applied to the same starting parameters and the backend's OWN gradients,
//   at 1e-5. At step 1 AdamW moves every parameter by about lr * sign(g), so a comparison
//   with the CPU's updated parameters measures how many near-zero gradients bf16 noise
//   flipped (1.4e-3 with lr 1e-3, issue 17), not the update; the gradients are compared
//   with the CPU's on their own row.
#pragma once

#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "common/config.hpp"
#include "common/precision.hpp"

namespace meshbench::parallel {

struct ParityRow {
  std::string op;
  double rel_err, tolerance;
  bool pass() const { return rel_err <= tolerance; }  // NaN fails
};

double parity_tolerance(const std::string& op, Precision p);

// ||got - ref|| / ||ref|| (||got - ref|| when ref is all zero), in double.
double rel_error(const std::vector<float>& got, const std::vector<float>& ref);

// Every op of `be` (run as precision p) against the CPU layers on data drawn from seed.
std::vector<ParityRow> layer_parity(Backend<float>& be, Precision p, unsigned seed);

}  // namespace meshbench::parallel
