// GemmOperands: the cuBLAS side of the CUDA backend (backend_cuda.cu): the stream and handle
// every GEMM is queued on, the operands of a GEMM plan (operands.hpp) with bf16 mode's staged
// activations and weight copies, the strided batches, and the stream-ordered scratch slots the
// backend's ops share. CudaBackend derives from it and owns the stream's and handle's life:
// it creates both and, at its end, frees the mirrors and the scratch before destroying them.
// Not here: the layers' ops and the memory calls (backend_cuda.cu), the kernels (kernels.cuh).
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <vector>

#include "core/error.hpp"
#include "kernels/cuda/cublas_api.cuh"
#include "kernels/cuda/kernels.cuh"
#include "kernels/operands.hpp"
#include "kernels/cuda/cuda_backend.hpp"

namespace meshbench::parallel::cuda {
namespace {

constexpr const char* kG = "-";  // check macros: no communicator group here

class GemmOperands {
 protected:
  explicit GemmOperands(Precision p) : p_(p) {}

  struct Mirror {  // the bf16 copy of a GEMM weight (n elements at fp32)
    const float* fp32;
    int64_t n;
    __nv_bfloat16* bf16;
  };
  struct Scratch {
    void* p = nullptr;
    std::size_t bytes = 0;
  };
  // The base pointer of every array a plan names: fp32 for outputs and in fp32 mode, the
  // staged bf16 copy for GEMM inputs in bf16 mode.
  struct Operands {
    const void* in[int(Array::kCount)] = {};
    float* out[int(Array::kCount)] = {};
    int next_slot = 0;  // the next bf16 staging slot (0 .. kStagingSlots - 1)
  };
  struct Named {
    Array a;
    const float* p;
  };

  template <typename Shape>
  Operands operands(std::initializer_list<Named> arrays, const Shape& s, Array later1 = Array::kOut,
                    Array later2 = Array::kOut) {
    Operands x;
    for (const Named& n : arrays) {
      const int i = int(n.a);
      x.out[i] = const_cast<float*>(n.p);
      x.in[i] = n.p;
      const bool input = n.a == Array::kInp || n.a == Array::kWeight || n.a == Array::kDout ||
                         n.a == Array::kQkv || n.a == Array::kAtt || n.a == Array::kDatt || n.a == Array::kQ ||
                         n.a == Array::kK || n.a == Array::kV || n.a == Array::kS || n.a == Array::kDs;
      // Arrays a kernel of this op writes before a GEMM reads them are staged later (stage()).
      if (p_ == Precision::kBf16 && input && n.p != nullptr && n.a != later1 && n.a != later2) {
        if (n.a == Array::kWeight)
          x.in[i] = weight_bf16(n.p, numel(s, n.a));
        else
          stage(x, n.a, n.p, numel(s, n.a));
      }
    }
    return x;
  }
  // In bf16 mode: the whole of array `a` (n elements) converted into the next scratch slot.
  void stage(Operands& x, Array a, const float* p, int64_t n) {
    if (p_ != Precision::kBf16) return;
    if (x.next_slot >= kStagingSlots) throw std::logic_error("cuda backend: more staged GEMM inputs than staging slots");
    auto* dst = static_cast<__nv_bfloat16*>(scratch(x.next_slot++, sizeof(__nv_bfloat16) * size_t(n)));
    convert(dst, p, n);
    x.in[int(a)] = dst;
  }
  void gemm(const GemmPlan& g, const Operands& x) {
    cublas(g, x.in[int(g.a.array)], x.in[int(g.b.array)], x.out[int(g.c.array)]);
  }
  // A strided batch: one cuBLAS call for all its entries (one plain GEMM when count is 1).
  void gemm_batched(const GemmBatch& gb, const Operands& x) {
    if (gb.count == 1) return gemm(gb.first, x);
    const GemmPlan& g = gb.first;
    const cublasOperation_t opA = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    float* c = x.out[int(g.c.array)] + g.c.offset;
    if (p_ == Precision::kFp32) {
      const float* a = static_cast<const float*>(x.in[int(g.a.array)]) + g.a.offset;
      const float* b = static_cast<const float*>(x.in[int(g.b.array)]) + g.b.offset;
      MB_CHECK_CUBLAS(cublas_api().sgemm_strided_batched(blas_, opB, opA, g.N, g.M, g.K, &g.alpha, b, g.b.ld, gb.sb, a,
                                                g.a.ld, gb.sa, &g.beta, c, g.c.ld, gb.sc, gb.count), kG);
      return;
    }
    const __nv_bfloat16* a = static_cast<const __nv_bfloat16*>(x.in[int(g.a.array)]) + g.a.offset;
    const __nv_bfloat16* b = static_cast<const __nv_bfloat16*>(x.in[int(g.b.array)]) + g.b.offset;
    MB_CHECK_CUBLAS(cublas_api().gemm_strided_batched_ex(blas_, opB, opA, g.N, g.M, g.K, &g.alpha, b, CUDA_R_16BF, g.b.ld, gb.sb,
                                               a, CUDA_R_16BF, g.a.ld, gb.sa, &g.beta, c, CUDA_R_32F, g.c.ld, gb.sc,
                                               gb.count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), kG);
  }
  // Row-major C = alpha op(A) op(B) + beta C on column-major cuBLAS: it computes
  // C^T (N,M) = op(B)^T op(A)^T, so B comes first and the sizes swap. A, B are the arrays'
  // base pointers (fp32, or bf16 in kBf16); the plan's offsets are applied here.
  void cublas(const GemmPlan& g, const void* A, const void* B, float* C) {
    const cublasOperation_t opA = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    float* c = C + g.c.offset;
    if (p_ == Precision::kFp32) {
      const float* a = static_cast<const float*>(A) + g.a.offset;
      const float* b = static_cast<const float*>(B) + g.b.offset;
      MB_CHECK_CUBLAS(cublas_api().sgemm(blas_, opB, opA, g.N, g.M, g.K, &g.alpha, b, g.b.ld, a, g.a.ld,
                                  &g.beta, c, g.c.ld), kG);
      return;
    }
    const __nv_bfloat16* a = static_cast<const __nv_bfloat16*>(A) + g.a.offset;
    const __nv_bfloat16* b = static_cast<const __nv_bfloat16*>(B) + g.b.offset;
    MB_CHECK_CUBLAS(cublas_api().gemm_ex(blas_, opB, opA, g.N, g.M, g.K, &g.alpha, b, CUDA_R_16BF, g.b.ld, a,
                                 CUDA_R_16BF, g.a.ld, &g.beta, c, CUDA_R_32F, g.c.ld,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), kG);
  }
  void convert(__nv_bfloat16* dst, const float* src, int64_t n) {
    if (n <= 0) return;
    k_to_bf16<<<blocks_for(size_t(n)), 256, 0, stream_>>>(dst, src, size_t(n));
    MB_CHECK_LAUNCH(k_to_bf16, kG);
  }
  // The bf16 copy of weight w (n elements), made at its first use.
  const __nv_bfloat16* weight_bf16(const float* w, int64_t n) {
    for (auto& m : mirrors_)
      if (m.fp32 == w && m.n == n) return m.bf16;
    Mirror m{w, n, nullptr};
    MB_CHECK_CUDA(cudaMallocAsync(&m.bf16, sizeof(__nv_bfloat16) * size_t(n), stream_), kG);
    convert(m.bf16, w, n);
    mirrors_.push_back(m);
    return m.bf16;
  }
  // Scratch slot i of at least `bytes`. Growing is stream-ordered (issue 44, item 11): the old
  // block is freed behind its queued users and the new one allocated on the same stream, so
  // neither the host nor the device synchronises (MoE sizes vary from step to step, inside
  // timed steps); it grows by at least half again, so a slowly growing size settles.
  void* scratch(int i, std::size_t bytes) {
    Scratch& s = scratch_[i];
    if (s.bytes < bytes) {
      const std::size_t grown = std::max(bytes, s.bytes + s.bytes / 2);
      if (s.p) MB_CHECK_CUDA(cudaFreeAsync(s.p, stream_), kG);
      s.p = nullptr;
      MB_CHECK_CUDA(cudaMallocAsync(&s.p, grown, stream_), kG);
      s.bytes = grown;
    }
    return s.p;
  }

  Precision p_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::vector<Mirror> mirrors_;
  // 0 .. kStagingSlots-1: GEMM operands converted to bf16 (chunk attention's backward stages
  // six: Q, K, V, dO, P, dS); kReduceSlot: column-sum tiles; kChunk*: chunk attention's scores,
  // score gradients, a pair's output and its rows' max and sum.
  // kFlashD: flash attention's rowsum(dO * O); kMoePlan: the dispatch plan's per-chunk counts.
  static constexpr int kStagingSlots = 6, kReduceSlot = 6, kChunkS = 7, kChunkDs = 8, kChunkOpair = 9, kChunkStats = 10,
                       kFlashD = 11, kMoePlan = 12;
  Scratch scratch_[13];
};

}  // namespace
}  // namespace meshbench::parallel::cuda
