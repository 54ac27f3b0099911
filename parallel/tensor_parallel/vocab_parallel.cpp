#include "tensor_parallel/vocab_parallel.hpp"

#include "tensor_parallel/mappings.hpp"

namespace meshbench::parallel {

template <typename S>
S vocab_parallel_cross_entropy(Backend<S>& be, GroupComm<S>& tp, const LossTimer& time, S* logits, S* losses,
                               S* stats, const int32_t* targets, int N, int V, int valid) {
  S* mx = stats;
  S* sum = mx + N;
  S* tl = sum + N;
  time([&] { be.crossentropy_rowmax(mx, logits, N, V, valid); });
  tp.all_reduce_max(mx, N);
  time([&] { be.crossentropy_partial(logits, sum, tl, logits, mx, targets, N, V, valid); });
  reduce_over_tp(tp, sum, N);
  reduce_over_tp(tp, tl, N);
  S loss{};
  time([&] { loss = be.crossentropy_finish(logits, losses, sum, tl, mx, N, V); });
  return loss;
}

template float vocab_parallel_cross_entropy<float>(Backend<float>&, GroupComm<float>&, const LossTimer&, float*,
                                                   float*, float*, const int32_t*, int, int, int);
template double vocab_parallel_cross_entropy<double>(Backend<double>&, GroupComm<double>&, const LossTimer&, double*,
                                                     double*, double*, const int32_t*, int, int, int);

}  // namespace meshbench::parallel
