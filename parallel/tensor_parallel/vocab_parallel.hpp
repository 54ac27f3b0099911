// Tensor parallel's vocabulary split (Megatron-LM's VocabParallelEmbedding and vocab-parallel
// cross-entropy): each rank holds V / t rows of the (padded) vocabulary. The embedding looks
// up the tokens in its rows (0 elsewhere) and the partial rows are summed by g (mappings.hpp);
// the loss never builds the full logits: three all-reduces of N values (the row max, the sums
// of exponentials, the target logits) and the rest on each rank's slice.
// Not here: the lookup and the cross-entropy kernels (kernels/), the model wiring (model/).
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/backend.hpp"
#include "common/group_comm.hpp"

namespace meshbench::parallel {

// Times a loss kernel (the model's profiler, Op::kLoss).
using LossTimer = std::function<void(const std::function<void()>&)>;

// The mean cross-entropy over N rows whose logits hold this rank's V columns, `valid` of them
// real (the rest padding): probabilities left in `logits`, per-row losses in `losses`;
// `stats` is a scratch of 3 N. Collective over tp.
template <typename S>
S vocab_parallel_cross_entropy(Backend<S>& be, GroupComm<S>& tp, const LossTimer& time, S* logits, S* losses,
                               S* stats, const int32_t* targets, int N, int V, int valid);

}  // namespace meshbench::parallel
