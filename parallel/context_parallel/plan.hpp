// Context parallel: the bytes a plan must move over the CP group (dim "cp"). The attention
// is context_parallel/attention.hpp, the wiring model/model.cpp, the group kernels/comm_group.hpp.
#pragma once

#include <vector>

#include "common/grad_sync.hpp"
#include "common/plan.hpp"

namespace meshbench::parallel {

// Per rank and step, with a rank's K/V block of n = (b s / C) x 2 kv elements (kv = KV
// heads per tensor-parallel rank x head size), L layers and m micro-batches:
//   ring:      send/recv, per layer and micro-batch (C-1) blocks forward, (C-1) K/V blocks
//              and C dK/dV blocks backward;
//   allgather: all-gathers of C n (forward, and again in the backward) and a reduce-scatter
//              of C n per layer and micro-batch;
//   ulysses:   all-to-alls of the rank's rows: q, k, v forward and their gradients backward
//              (b s / C x (q + 2 kv)), the output forward and its gradient backward (x q).
// `layers`: this rank's blocks (a pipeline stage's; -1: all).
// The context-parallel rules: seq divisible by 2 cp (zig-zag) or cp; Ulysses: heads and kv
// heads per tensor-parallel rank divisible by cp; with --sp, seq / cp divisible by tp; no MoE.
void validate_context_parallel(const Plan& plan);

std::vector<AnalyticBytes> cp_analytic(const Plan& plan, int scalar_bytes, int layers = -1);

}  // namespace meshbench::parallel
