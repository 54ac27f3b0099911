// The GEMMs the device backends issue for the matmul and attention layers, as data: for each
// call its transposes, sizes, scalars and the three operands as row-major views (offset,
// rows, cols, leading dimension) into named arrays. The CUDA backend (cuda/backend_cuda.cu)
// and its host emulation (backend_emulated.cpp) both execute these plans, so the offsets
// they use are the ones a CPU unit test bounds against the array sizes: every view ends at
// offset + (rows-1)*ld + cols, which must not pass the array (issue 17, defect 3: a column
// slice of a wider matrix, such as one head of the fused qkv, ends before rows*ld).
// Not here: the CPU reference's own blocked GEMMs (layers.cpp), which the plans must match.
//
// Dimensions as layers.hpp: B, T, NH, KVH, hs, C = NH*hs, QKV = (NH + 2*KVH)*hs; matmul N
// rows, C inputs, OC outputs. A GEMM is C (M,N) = alpha op(A) op(B) + beta C (compute::gemm).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace meshbench::parallel {

// The arrays an op reads or writes (the layer's argument of that name).
enum class Array { kInp, kWeight, kOut, kDout, kDinp, kDweight, kQkv, kAtt, kDatt, kDqkv,
                   // context-parallel chunk attention: the chunk's Q, K, V, output, the scores or
                   // probabilities S and their gradient dS (B NH Tq Tk scratch), a pair's
                   // unnormalised output (B Tq NH hs scratch), the input gradients
                   kQ, kK, kV, kO, kS, kDs, kOpair, kDq, kDk, kDv, kCount };
const char* array_name(Array a);

// A rows x cols row-major block of `array` starting at element `offset`, rows `ld` apart.
struct View {
  Array array;
  int64_t offset;
  int rows, cols, ld;
};
// One past the last element the view touches (offset when it is empty).
inline int64_t view_end(const View& v) {
  return v.rows <= 0 || v.cols <= 0 ? v.offset : v.offset + int64_t(v.rows - 1) * v.ld + v.cols;
}

struct GemmPlan {
  bool ta, tb;  // A stored (K,M) when ta, else (M,K); B stored (N,K) when tb, else (K,N)
  int M, N, K;
  float alpha, beta;
  View a, b, c;
};

struct MatmulShape {
  int N, C, OC;
};
struct AttentionShape {
  int B, T, NH, KVH, hs;
  int C() const { return NH * hs; }
  int QKV() const { return (NH + 2 * KVH) * hs; }
};
// One (query chunk, key chunk) pair of context-parallel attention (Backend::
// attention_chunk_forward/backward): Tq query rows against Tk key rows per sample, each array
// row-major with its own leading dimension (head h at column h hs).
struct ChunkShape {
  int B, Tq, Tk, NH, KVH, hs;
  int ldq, ldk, ldv, ldo, lddo, lddq, lddk, lddv;
};

// Elements of each array the op takes (what the caller allocated).
int64_t numel(const MatmulShape& s, Array a);
int64_t numel(const AttentionShape& s, Array a);
int64_t numel(const ChunkShape& s, Array a);

// matmul_forward: out (N,OC) = inp (N,C) @ weight (OC,C)^T + out (the bias is written first).
GemmPlan matmul_forward_gemm(const MatmulShape& s);
// matmul_backward: [0] dinp = dout @ weight, [1] dweight += dout^T @ inp.
std::array<GemmPlan, 2> matmul_backward_gemms(const MatmulShape& s);

// Head h of sample b. Forward: [0] att = scale Q K^T, then the causal softmax of att in
// place, then [1] out = att V. Backward (dqkv zeroed first): [0] datt = dout V^T, then the
// softmax backward of datt in place, then [1] dQ = scale datt K, [2] dK += scale datt^T Q,
// [3] dV += att^T dout. Heads of one KV group accumulate into the same dK, dV.
std::array<GemmPlan, 2> attention_forward_gemms(const AttentionShape& s, int b, int h);
std::array<GemmPlan, 4> attention_backward_gemms(const AttentionShape& s, int b, int h);

// A strided batch of GEMMs (cublasGemmStridedBatched): `count` plans, the i-th `first` with
// its a, b and c offsets advanced by i times sa, sb, sc.
struct GemmBatch {
  GemmPlan first;
  int count = 1;
  int64_t sa = 0, sb = 0, sc = 0;
};
GemmPlan batch_entry(const GemmBatch& g, int i);

// The attention's GEMM `which` (attention_forward_gemms' when !backward, else
// attention_backward_gemms') for every (b, h), as strided batches over the KV heads: for each
// sample b and index j inside a KV group, one batch over the groups g (query head
// h = g NH/KVH + j), so B x NH/KVH calls instead of B x NH (issue 30, defect 6: 6 B NH tiny
// GEMMs per layer made the GPU attention launch-bound). Batching over groups, not over a
// group's query heads, keeps every entry's dK and dV in its own KV head (no two entries of a
// batch accumulate into the same block), and each KV head still accumulates its query heads
// j = 0, 1, ... in order. Throws std::logic_error if the per-head plans are not strided in g.
std::vector<GemmBatch> attention_batches(const AttentionShape& s, bool backward, int which);

// Chunk attention (issue 30, defect 14: one thread per query row, serial over the keys, made
// GPU context-parallel timings meaningless), the same GEMM form as the whole attention, for
// head h of sample b (KV head h / (NH/KVH)), scores scaled by 1/sqrt(hs). Forward: [0]
// S = scale Q K^T (Tq x Tk), then a row kernel turns S into exp(S - m) over the visible keys
// with the row's max m and sum l, [1] Opair = P V; a merge kernel folds Opair / l into the
// output and its log-sum-exp. Backward: [0] S = scale Q K^T, then P = exp(S - lse) over the
// visible keys, [1] dV += P^T dO, [2] dP = dO V^T (into dS), then dS = scale P (dP - D),
// [3] dQ += dS K, [4] dK += dS^T Q.
std::array<GemmPlan, 2> chunk_forward_gemms(const ChunkShape& s, int b, int h);
std::array<GemmPlan, 5> chunk_backward_gemms(const ChunkShape& s, int b, int h);
// Those GEMMs as strided batches over the KV groups, as attention_batches.
std::vector<GemmBatch> chunk_batches(const ChunkShape& s, bool backward, int which);
// The query rows' visible keys (row i of the chunk against keys from k0): min(Tk, q0 + i - k0 + 1),
// at most Tk, <= 0 for none.
inline int chunk_visible(int i, int Tk, int q0, int k0) { return q0 + i - k0 + 1 < Tk ? q0 + i - k0 + 1 : Tk; }

// The stored extent of an operand is consistent with the GEMM (rows and cols match op(A),
// op(B), C for M, N, K; ld >= cols; offset >= 0). The unit test checks this for every plan.
bool plan_consistent(const GemmPlan& g);

}  // namespace meshbench::parallel
