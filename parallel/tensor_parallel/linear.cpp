#include "tensor_parallel/linear.hpp"

#include "tensor_parallel/mappings.hpp"

namespace meshbench::parallel {

namespace {
// A GEMM of the linear: `part` of it, (M x K) times (K x Nout), `gemms` GEMMs of that shape.
void call(const ComputeOp& run, const char* part, int M, int Nout, int K, double gemms,
          const std::function<void()>& op) {
  if (run)
    run(OpInfo{Op::kMatmul, part, M, Nout, K, gemms * 2.0 * M * Nout * K}, op);
  else
    op();
}
}  // namespace

template <typename S>
void column_forward(Backend<S>& be, const ComputeOp& run, GroupComm<S>* tp, const TpMode& m, S* out, const S* x,
                    S* xfull, const S* w, const S* b, int N, int C, int OC) {
  const S* in = f_forward(tp, m.sp, x, xfull, tp ? int64_t{N} / tp->size() * C : 0);
  call(run, "fwd", N, OC, C, 1, [&] { be.matmul_forward(out, in, w, b, N, C, OC, false); });
}

template <typename S>
void column_backward(Backend<S>& be, const ComputeOp& run, GroupComm<S>* tp, const TpMode& m, S* dx, S* dxfull,
                     S* dw, S* db, const S* dout, const S* x, S* xfull, const S* w, int N, int C, int OC) {
  if (tp == nullptr) {
    call(run, "bwd", N, OC, C, 2, [&] { be.matmul_backward(dx, dw, db, dout, x, w, N, C, OC); });
    return;
  }
  const int64_t part = int64_t{N} * C / tp->size();
  auto input_grad = [&](S* d) {
    call(run, "dinput", N, OC, C, 1, [&] { be.matmul_backward(d, nullptr, nullptr, dout, nullptr, w, N, C, OC); });
  };
  auto weight_grad = [&](const S* in) {
    call(run, "dweight", N, OC, C, 1, [&] { be.matmul_backward(nullptr, dw, db, dout, in, nullptr, N, C, OC); });
  };
  if (!m.sp) {  // f's backward: all-reduce the input gradient
    input_grad(dx);
    if (!m.overlap) {
      reduce_over_tp(*tp, dx, int64_t{N} * C);
      weight_grad(x);
      return;
    }
    const int h = post_reduce_over_tp(*tp, dx, int64_t{N} * C);
    weight_grad(x);
    tp->wait(h);
    return;
  }
  // Sequence parallel: the weight gradient needs the gathered input (re-gathered, or kept by
  // the forward); the input gradient is reduce-scattered back to this rank's rows.
  if (!m.overlap) {
    if (m.regather) gather_sequence(*tp, xfull, x, part);
    input_grad(dxfull);
    reduce_scatter_sequence(*tp, dx, dxfull, part);
    weight_grad(xfull);
    return;
  }
  const int g = m.regather ? post_gather_sequence(*tp, xfull, x, part) : -1;
  input_grad(dxfull);
  if (g >= 0) tp->wait(g);
  const int r = post_reduce_scatter_sequence(*tp, dx, dxfull, part);
  weight_grad(xfull);
  tp->wait(r);
}

template <typename S>
void row_forward(Backend<S>& be, const ComputeOp& run, GroupComm<S>* tp, const TpMode& m, S* y, const S* x,
                 const S* w, const S* b, int N, int C, int OC, S* scratch) {
  if (tp == nullptr) {  // the bias and the residual fused into the GEMM's output
    call(run, "fwd", N, OC, C, 1, [&] { be.matmul_forward(y, x, w, b, N, C, OC, true); });
    return;
  }
  call(run, "fwd", N, OC, C, 1, [&] { be.matmul_forward(scratch, x, w, nullptr, N, C, OC, false); });
  const int rows = m.sp ? N / tp->size() : N;
  const S* reduced = g_forward(*tp, m.sp, scratch, scratch + int64_t{N} * OC, int64_t{N} * OC);
  const auto add = [&] { be.bias_residual_add(y, reduced, b, rows, OC); };
  if (run)
    run(OpInfo{Op::kResidual, "bias_residual"}, add);
  else
    add();
}

template <typename S>
void row_backward(Backend<S>& be, const ComputeOp& run, GroupComm<S>* tp, const TpMode& m, S* dx, S* dw, S* db,
                  const S* dy, S* dyfull, const S* x, const S* w, int N, int C, int OC) {
  const S* d = g_backward(tp, m.sp, dy, dyfull, tp ? int64_t{N} / tp->size() * OC : 0);
  call(run, "bwd", N, OC, C, 2, [&] { be.matmul_backward(dx, dw, db, d, x, w, N, C, OC); });
}

#define MB_TP_INSTANTIATE(S)                                                                                  \
  template void column_forward<S>(Backend<S>&, const ComputeOp&, GroupComm<S>*, const TpMode&, S*, const S*,   \
                                  S*, const S*, const S*, int, int, int);                                   \
  template void column_backward<S>(Backend<S>&, const ComputeOp&, GroupComm<S>*, const TpMode&, S*, S*, S*,    \
                                   S*, const S*, const S*, S*, const S*, int, int, int);                    \
  template void row_forward<S>(Backend<S>&, const ComputeOp&, GroupComm<S>*, const TpMode&, S*, const S*,      \
                               const S*, const S*, int, int, int, S*);                                      \
  template void row_backward<S>(Backend<S>&, const ComputeOp&, GroupComm<S>*, const TpMode&, S*, S*, S*,       \
                                const S*, S*, const S*, const S*, int, int, int);
MB_TP_INSTANTIATE(float)
MB_TP_INSTANTIATE(double)

}  // namespace meshbench::parallel
