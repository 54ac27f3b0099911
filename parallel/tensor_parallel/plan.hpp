// Tensor parallel (Megatron-LM's column/row split, with sequence parallel): the bytes a plan
// must move over the TP group. The linears are tensor_parallel/linear.hpp, the wiring
// model/model.cpp, the group kernels/comm_group.hpp, the weights' split the layout's
// Shard (sharding.hpp).
#pragma once

#include <vector>

#include "common/grad_sync.hpp"
#include "common/plan.hpp"

namespace meshbench::parallel {

// The tensor-parallel payload per rank and step of a plan (dim "tp"), from its shapes:
// without SP, 4 all-reduces of b x s x h (s / cp under context parallel) per layer per micro-batch, plus the embedding's
// and the LM head's input gradient, plus the cross-entropy's three all-reduces of b x s;
// with SP, all-gathers and reduce-scatters instead (4 + 4 per layer, 2 more all-gathers per
// layer with --sp-regather) and the norm gradients all-reduced once per step.
// MoE blocks (etp = 1): replicated over tp they drop the MLP's two all-reduces; with expert
// parallel the token slices' output, d(x) and d(gates) are all-reduced instead.
// A pipeline stage holds `layers` blocks (-1: all), `moe_layers` of them MoE (-1: all the
// model's), the embedding (`embed`) and the head with the loss (`head`); without sequence
// parallel its traffic counts only those.
// The tensor-parallel rules: heads, kv heads and ffn divisible by tp (seq too with --sp);
// --sp needs tp >= 2; MoE blocks need etp = 1 and no SP; no ZeRO with tp in this build.
void validate_tensor_parallel(const Plan& plan);

std::vector<AnalyticBytes> tp_analytic(const Plan& plan, int scalar_bytes, int layers = -1, bool embed = true,
                                       bool head = true, int moe_layers = -1);

}  // namespace meshbench::parallel
