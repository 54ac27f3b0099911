// Tensor-parallel linears over a backend and a tensor-parallel group (Megatron-LM's
// ColumnParallelLinear / RowParallelLinear with its conjugate mappings): the model wiring
// (model.cpp) calls these for every linear, so one code path serves tp = 1 (no group: the
// plain ops), tensor parallel with all-reduces, and sequence parallel with all-gathers and
// reduce-scatters, on the CPU and on CUDA. The group itself (communication, trace) is
// implemented over a Communicator in kernels/comm_group.hpp.
//
// Rows: N = B x T tokens in full. Sequence parallel gives each rank n = N / t contiguous
// rows of the [B, T] token order (the regions between the linears: norms, residual).
// Column-parallel (qkv, fc, the LM head): the weight holds OC of the output rows.
//   forward:  f = identity (AR) or all-gather of the n-row input (SP); out (N, OC) = X W^T + b.
//   backward: dX (N, C) = dout W, all-reduced (AR) or reduce-scattered to n rows (SP), posted
//             non-blocking and overlapped with the weight gradient GEMM when m.overlap.
// Row-parallel (attention proj, MLP proj): the weight holds C of the input columns.
//   forward:  y += g(x W^T) + b, g = all-reduce (AR, y full rows) or reduce-scatter (SP, y n
//             rows); the bias is added once, after the reduction (bias_residual_add).
//   backward: dy (AR: full rows, g's backward is the identity; SP: n rows all-gathered).
// Not here: communicators and recording (kernels/comm_group.hpp, common/trace.hpp), the model's wiring (model.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/backend.hpp"
#include "common/group_comm.hpp"
#include "common/op.hpp"

namespace meshbench::parallel {



// How the linears communicate (--sp, --sp-regather, --no-overlap).
struct TpMode {
  bool sp = false;        // sequence parallel
  bool regather = true;   // SP: re-gather a column-parallel input in the backward (else keep it)
  bool overlap = true;    // post the input-gradient collective before the weight-gradient GEMM
};

// out (N, OC) = X W^T + b. AR or tp null: x is X (N, C). SP: x holds this rank's N / t rows and
// is gathered into xfull (N, C), which the backward reads again unless it re-gathers.
template <typename S>
void column_forward(Backend<S>& be, const ComputeOp& run, GroupComm<S>* tp, const TpMode& m, S* out, const S* x, S* xfull,
                    const S* w, const S* b, int N, int C, int OC);
// dx = the input gradient: (N, C) written (AR, tp null) or this rank's N / t rows written (SP,
// reduced from dxfull (N, C), a scratch). dw, db +=. xfull: SP, the gathered input (re-gathered
// first when m.regather).
template <typename S>
void column_backward(Backend<S>& be, const ComputeOp& run, GroupComm<S>* tp, const TpMode& m, S* dx, S* dxfull, S* dw, S* db,
                     const S* dout, const S* x, S* xfull, const S* w, int N, int C, int OC);

// y += g(x W^T) + b with x (N, C) this rank's input columns. y: AR or tp null, (N, OC); SP, this
// rank's N / t rows. scratch: (N + N / t) x OC (unused without a group).
template <typename S>
void row_forward(Backend<S>& be, const ComputeOp& run, GroupComm<S>* tp, const TpMode& m, S* y, const S* x, const S* w,
                 const S* b, int N, int C, int OC, S* scratch);
// dx (N, C) written, dw, db +=. dy: AR or tp null, (N, OC); SP, this rank's rows, gathered into
// dyfull (N, OC).
template <typename S>
void row_backward(Backend<S>& be, const ComputeOp& run, GroupComm<S>* tp, const TpMode& m, S* dx, S* dw, S* db, const S* dy,
                  S* dyfull, const S* x, const S* w, int N, int C, int OC);

}  // namespace meshbench::parallel
