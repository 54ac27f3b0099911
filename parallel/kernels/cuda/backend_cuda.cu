// CudaBackend: the step engine's layers on one GPU, behind Backend<float> (backend.hpp).
// cuBLAS (opened at run time: cublas_api.cuh) runs the GEMM plans of operands.hpp (fp32 SGEMM without TF32, or bf16 inputs with
// fp32 accumulation through cublasGemmEx); kernels.cuh has the other layers. Every call is
// queued on the backend's own non-blocking stream (stream()), in program order; upload and
// download are ordered on it and complete before they return. Buffers come from the device's
// stream-ordered pool (cudaMallocAsync, zeroed on the stream; cudaFreeAsync on release, so a
// release neither waits for the GPU nor returns memory to the driver: ZeRO-3's gathered
// units, pipeline slots and bf16 mirrors are freed per unit or micro-batch without
// serializing host and GPU). The cuBLAS handle belongs to the object (never a static).
// bf16 operands (issue 17, defect 4): each GEMM weight keeps a bf16 copy, made at its first
// use and refreshed by whatever op writes the weight (adamw_update, upload, copy, zero,
// scale, written()), so the forward and backward never convert weights; an activation is
// converted once, whole, where a GEMM consumes it (all heads of qkv at once).
// Not here: model wiring (model.cpp), availability (cuda_backend.hpp), parity (parity.hpp).
// Reference: llm.c's train_gpt2.cu (cuBLAS for the linears, one kernel per layer op) behind a
// ggml-style backend interface; the CPU layers (layers.cpp) are what it must match.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <deque>
#include <cmath>
#include <stdexcept>
#include <string>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "kernels/cuda/cublas_api.cuh"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/flash_kernels.cuh"
#include "kernels/cuda/gemm_operands.cuh"
#include "kernels/cuda/kernels.cuh"
#include "kernels/cuda/moe_kernels.cuh"
#include "kernels/operands.hpp"

namespace meshbench::parallel::cuda {
namespace {

class CudaBackend final : public Backend<float>, private GemmOperands {
 public:
  CudaBackend(Precision p, int device) : GemmOperands(p), device_(device) {
    MB_CHECK_CUDA(cudaSetDevice(device), kG);
    MB_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), kG);
    // The pool keeps up to an eighth of the device's memory across synchronisations (the
    // per-unit and per-micro-batch buffers are reused rather than returned to the driver and
    // asked again), and returns what lies above it, so NCCL's and cudaMalloc's allocations
    // still find memory (issue 44, item 11: it kept everything, UINT64_MAX).
    cudaMemPool_t pool;
    MB_CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, device), kG);
    size_t free_b = 0, total_b = 0;
    MB_CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b), kG);
    uint64_t keep = total_b / 8;
    MB_CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), kG);
    MB_CHECK_CUBLAS(cublas_api().create(&blas_), kG);
    MB_CHECK_CUBLAS(cublas_api().set_stream(blas_, stream_), kG);
    // Default math: fp32 GEMMs stay fp32 (no TF32); bf16 inputs take the tensor cores.
    MB_CHECK_CUBLAS(cublas_api().set_math_mode(blas_, CUBLAS_DEFAULT_MATH), kG);
  }
  void bind_thread() override { MB_CHECK_CUDA(cudaSetDevice(device_), kG); }

  ~CudaBackend() override {
    (void)cudaStreamSynchronize(stream_);
    for (auto& m : mirrors_) (void)cudaFree(m.bf16);
    for (auto& s : scratch_) (void)cudaFreeAsync(s.p, stream_);
    (void)cudaStreamSynchronize(stream_);
    if (bad_) (void)cudaFree(bad_);
    if (loss_acc_) (void)cudaFree(loss_acc_);
    (void)cublas_api().destroy(blas_);
    (void)cudaStreamDestroy(stream_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return std::string("cuda ") + precision_name(p_); }
  compute::MemKind mem() const override { return compute::MemKind::kDevice; }
  void* stream() const override { return stream_; }
  void synchronize() override {
    MB_CHECK_CUDA(cudaStreamSynchronize(stream_), kG);
    staged_.clear();
  }
  int64_t take_nonfinite_grads() override {
    if (!bad_) return 0;
    unsigned long long n = 0;
    MB_CHECK_CUDA(cudaMemcpyAsync(&n, bad_, sizeof n, cudaMemcpyDeviceToHost, stream_), kG);
    MB_CHECK_CUDA(cudaMemsetAsync(bad_, 0, sizeof n, stream_), kG);
    MB_CHECK_CUDA(cudaStreamSynchronize(stream_), kG);
    return static_cast<int64_t>(n);
  }

  void* alloc(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    MB_CHECK_CUDA(cudaMallocAsync(&p, bytes, stream_), kG);
    MB_CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, stream_), kG);
    sizes_.push_back({p, bytes});
    return p;
  }
  // Stream-ordered: the ops queued before the release still read p; a later allocation on the
  // stream may reuse it only after them.
  void release(void* p) noexcept override {
    if (p == nullptr) return;
    auto it = std::find_if(sizes_.begin(), sizes_.end(), [&](const Alloc& a) { return a.p == p; });
    if (it != sizes_.end()) {
      const auto lo = static_cast<const char*>(p), hi = lo + it->bytes;
      for (auto m = mirrors_.begin(); m != mirrors_.end();) {
        const auto w = reinterpret_cast<const char*>(m->fp32);
        if (w >= lo && w < hi) {
          (void)cudaFreeAsync(m->bf16, stream_);
          m = mirrors_.erase(m);
        } else {
          ++m;
        }
      }
      sizes_.erase(it);
    }
    (void)cudaFreeAsync(p, stream_);
  }
  void upload(void* dst, const void* host, std::size_t bytes) override {
    if (bytes == 0) return;
    MB_CHECK_CUDA(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), kG);
    MB_CHECK_CUDA(cudaStreamSynchronize(stream_), kG);  // the host buffer is free on return
    written(dst, bytes);
  }
  void download(void* host, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    MB_CHECK_CUDA(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), kG);
    MB_CHECK_CUDA(cudaStreamSynchronize(stream_), kG);
    staged_.clear();  // the stream has run every queued upload
  }
  // The host bytes are copied into a block kept until the next synchronisation, so the caller
  // may reuse its buffer at once and the host never waits (issue 44, item 10).
  void upload_async(void* dst, const void* host, std::size_t bytes) override {
    if (bytes == 0) return;
    const auto* b = static_cast<const char*>(host);
    staged_.emplace_back(b, b + bytes);
    MB_CHECK_CUDA(cudaMemcpyAsync(dst, staged_.back().data(), bytes, cudaMemcpyHostToDevice, stream_), kG);
    written(dst, bytes);
  }
  bool defer_losses(bool on) override {
    if (on && !loss_acc_) {
      MB_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&loss_acc_), sizeof(double), stream_), kG);
      MB_CHECK_CUDA(cudaMemsetAsync(loss_acc_, 0, sizeof(double), stream_), kG);
    }
    defer_ = on;
    return on;
  }
  double take_losses() override {
    if (!loss_acc_) return 0.0;
    double sum = 0;
    download(&sum, loss_acc_, sizeof sum);
    MB_CHECK_CUDA(cudaMemsetAsync(loss_acc_, 0, sizeof(double), stream_), kG);
    return sum;
  }
  void zero(void* p, std::size_t bytes) override {
    if (bytes == 0) return;
    MB_CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, stream_), kG);
    written(p, bytes);
  }
  void copy(float* dst, const float* src, int64_t n) override {
    if (n <= 0) return;
    MB_CHECK_CUDA(cudaMemcpyAsync(dst, src, sizeof(float) * size_t(n), cudaMemcpyDeviceToDevice, stream_), kG);
    written(dst, sizeof(float) * size_t(n));
  }
  void scale(float* x, double a, int64_t n) override {
    if (n <= 0) return;
    k_scale<<<blocks_for(size_t(n)), 256, 0, stream_>>>(x, float(a), size_t(n));
    MB_CHECK_LAUNCH(k_scale, kG);
    written(x, sizeof(float) * size_t(n));
  }
  void add(float* dst, const float* src, int64_t n) override {
    if (n <= 0) return;
    k_add<<<blocks_for(size_t(n)), 256, 0, stream_>>>(dst, src, size_t(n));
    MB_CHECK_LAUNCH(k_add, kG);
    written(dst, sizeof(float) * size_t(n));
  }
  // Refresh the bf16 copy of any GEMM weight in [p, p + bytes) (backend.hpp), queued on the
  // stream; this backend's own writing ops call it too.
  void written(const void* p, std::size_t bytes) override {
    const auto lo = static_cast<const char*>(p), hi = lo + bytes;
    for (auto& m : mirrors_) {
      const auto w = reinterpret_cast<const char*>(m.fp32);
      if (w < hi && lo < w + sizeof(float) * size_t(m.n)) convert(m.bf16, m.fp32, m.n);
    }
  }

  void embedding_forward(float* out, const int32_t* tok, const float* wte, const float* wpe, int B,
                         int T, int C) override {
    const int N = B * T;
    k_embedding_fwd<<<blocks_for(size_t(N) * C), 256, 0, stream_>>>(out, tok, wte, wpe, N, T, C);
    MB_CHECK_LAUNCH(k_embedding_fwd, kG);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tok, int B,
                          int T, int C) override {
    const int N = B * T;
    k_embedding_bwd<<<blocks_for(size_t(N) * C), 256, 0, stream_>>>(dwte, dwpe, dout, tok, N, T, C);
    MB_CHECK_LAUNCH(k_embedding_bwd, kG);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                         const float* b, int N, int C) override {
    if (N <= 0) return;
    k_layernorm_fwd<<<N, row_threads(C), 0, stream_>>>(out, mean, rstd, inp, w, b, C);
    MB_CHECK_LAUNCH(k_layernorm_fwd, kG);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int N,
                          int C) override {
    if (N <= 0) return;
    k_layernorm_bwd<<<N, row_threads(C), 0, stream_>>>(dinp, dout, inp, w, mean, rstd, C);
    MB_CHECK_LAUNCH(k_layernorm_bwd, kG);
    const ColTiles t = col_tiles(N, C);
    float* pw = static_cast<float*>(scratch(kReduceSlot, 2 * sizeof(float) * size_t(t.tiles) * C));
    float* pb = pw + size_t(t.tiles) * C;
    k_layernorm_wb_partial<<<t.grid, dim3(32, 8), 0, stream_>>>(pw, pb, dout, inp, mean, rstd, N, C, t.rows);
    MB_CHECK_LAUNCH(k_layernorm_wb_partial, kG);
    k_col_reduce<<<blocks_for(size_t(C)), 256, 0, stream_>>>(dw, pw, t.tiles, C);
    MB_CHECK_LAUNCH(k_col_reduce, kG);
    k_col_reduce<<<blocks_for(size_t(C)), 256, 0, stream_>>>(db, pb, t.tiles, C);
    MB_CHECK_LAUNCH(k_col_reduce, kG);
  }
  void gelu_forward(float* out, const float* inp, int64_t N) override {
    if (N <= 0) return;  // a rank whose experts received no rows (hot-expert routing)
    k_gelu_fwd<<<blocks_for(size_t(N)), 256, 0, stream_>>>(out, inp, size_t(N));
    MB_CHECK_LAUNCH(k_gelu_fwd, kG);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N) override {
    if (N <= 0) return;
    k_gelu_bwd<<<blocks_for(size_t(N)), 256, 0, stream_>>>(dinp, inp, dout, size_t(N));
    MB_CHECK_LAUNCH(k_gelu_bwd, kG);
  }
  // The mean over rows in double on the host, as layers.cpp (this op synchronises).
  float crossentropy_forward(float* probs, float* losses, const float* logits, const int32_t* tgt,
                             int N, int V) override {
    k_ce_fwd<<<N, row_threads(V), 0, stream_>>>(probs, losses, logits, tgt, V);
    MB_CHECK_LAUNCH(k_ce_fwd, kG);
    return mean_loss(losses, N);
  }
  float mean_loss(const float* losses, int N) {
    if (defer_) {  // summed on the device, read by take_losses() after the step
      k_loss_add<<<1, 256, 0, stream_>>>(loss_acc_, losses, N);
      MB_CHECK_LAUNCH(k_loss_add, kG);
      return 0.f;
    }
    loss_host_.resize(size_t(N));
    download(loss_host_.data(), losses, sizeof(float) * size_t(N));
    double total = 0;
    for (float l : loss_host_) total += double(l);
    return float(total / N);
  }
  void crossentropy_backward(float* dlogits, const float* probs, const int32_t* tgt, float dloss,
                             int N, int V) override {
    const float scale = dloss / float(N);
    k_ce_bwd<<<blocks_for(size_t(N) * V), 256, 0, stream_>>>(dlogits, probs, tgt, scale, N, V);
    MB_CHECK_LAUNCH(k_ce_bwd, kG);
  }
  void crossentropy_rowmax(float* rowmax, const float* logits, int N, int V, int valid) override {
    k_ce_rowmax<<<N, row_threads(V), 0, stream_>>>(rowmax, logits, V, valid);
    MB_CHECK_LAUNCH(k_ce_rowmax, kG);
  }
  void crossentropy_partial(float* probs, float* sumexp, float* tlogit, const float* logits,
                            const float* rowmax, const int32_t* tgt, int N, int V, int valid) override {
    k_ce_partial<<<N, row_threads(V), 0, stream_>>>(probs, sumexp, tlogit, logits, rowmax, tgt, V, valid);
    MB_CHECK_LAUNCH(k_ce_partial, kG);
  }
  // The mean over rows in double on the host, as crossentropy_forward (this op synchronises).
  float crossentropy_finish(float* probs, float* losses, const float* sumexp, const float* tlogit,
                            const float* rowmax, int N, int V) override {
    k_ce_finish<<<N, row_threads(V), 0, stream_>>>(probs, losses, sumexp, tlogit, rowmax, V);
    MB_CHECK_LAUNCH(k_ce_finish, kG);
    return mean_loss(losses, N);
  }
  // Context-parallel chunk attention in GEMM form (operands.hpp chunk_batches; issue 30,
  // defect 14): strided cuBLAS batches over the KV groups and row kernels between them.
  void attention_chunk_forward(float* o, int ldo, float* lse, const float* q, int ldq, const float* k, int ldk,
                               const float* v, int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0,
                               bool first) override {
    const ChunkShape s{B, Tq, Tk, NH, KVH, hs, ldq, ldk, ldv, ldo, 0, 0, 0, 0};
    const size_t rows = size_t(B) * NH * Tq;
    float* S = static_cast<float*>(scratch(kChunkS, sizeof(float) * size_t(numel(s, Array::kS))));
    float* op = static_cast<float*>(scratch(kChunkOpair, sizeof(float) * size_t(numel(s, Array::kOpair))));
    float* m = static_cast<float*>(scratch(kChunkStats, 2 * sizeof(float) * rows));
    float* l = m + rows;
    Operands x = operands({{Array::kQ, q}, {Array::kK, k}, {Array::kV, v}, {Array::kS, S}, {Array::kOpair, op}}, s,
                          Array::kS);
    for (const GemmBatch& g : chunk_batches(s, false, 0)) gemm_batched(g, x);
    k_chunk_softmax<<<unsigned(rows), row_threads(Tk), 0, stream_>>>(S, m, l, Tq, Tk, q0, k0);
    MB_CHECK_LAUNCH(k_chunk_softmax, kG);
    stage(x, Array::kS, S, numel(s, Array::kS));
    for (const GemmBatch& g : chunk_batches(s, false, 1)) gemm_batched(g, x);
    k_chunk_merge<<<blocks_for(rows * size_t(hs)), 256, 0, stream_>>>(o, ldo, lse, op, m, l, B, Tq, Tk, NH, hs, q0, k0,
                                                                       first);
    MB_CHECK_LAUNCH(k_chunk_merge, kG);
    k_chunk_lse<<<blocks_for(rows), 256, 0, stream_>>>(lse, m, l, int(rows), Tq, Tk, q0, k0, first);
    MB_CHECK_LAUNCH(k_chunk_lse, kG);
  }
  void attention_chunk_backward(float* dq, int lddq, float* dk, int lddk, float* dv, int lddv, const float* dout,
                                int lddo, const float* D, const float* lse, const float* q, int ldq, const float* k,
                                int ldk, const float* v, int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0,
                                int k0) override {
    const ChunkShape s{B, Tq, Tk, NH, KVH, hs, ldq, ldk, ldv, 0, lddo, lddq, lddk, lddv};
    const size_t rows = size_t(B) * NH * Tq;
    float* S = static_cast<float*>(scratch(kChunkS, sizeof(float) * size_t(numel(s, Array::kS))));
    float* ds = static_cast<float*>(scratch(kChunkDs, sizeof(float) * size_t(numel(s, Array::kDs))));
    Operands x = operands({{Array::kQ, q}, {Array::kK, k}, {Array::kV, v}, {Array::kDout, dout}, {Array::kS, S},
                           {Array::kDs, ds}, {Array::kDq, dq}, {Array::kDk, dk}, {Array::kDv, dv}}, s, Array::kS,
                          Array::kDs);
    for (const GemmBatch& g : chunk_batches(s, true, 0)) gemm_batched(g, x);
    k_chunk_probs<<<unsigned(rows), row_threads(Tk), 0, stream_>>>(S, lse, Tq, Tk, q0, k0);
    MB_CHECK_LAUNCH(k_chunk_probs, kG);
    stage(x, Array::kS, S, numel(s, Array::kS));
    for (const GemmBatch& g : chunk_batches(s, true, 1)) gemm_batched(g, x);  // dV += P^T dO
    for (const GemmBatch& g : chunk_batches(s, true, 2)) gemm_batched(g, x);  // dP = dO V^T
    k_chunk_dscore<<<unsigned(rows), row_threads(Tk), 0, stream_>>>(ds, S, D, Tk, 1.f / std::sqrt(float(hs)));
    MB_CHECK_LAUNCH(k_chunk_dscore, kG);
    stage(x, Array::kDs, ds, numel(s, Array::kDs));
    const auto b3 = chunk_batches(s, true, 3), b4 = chunk_batches(s, true, 4);
    for (size_t i = 0; i < b3.size(); ++i) {  // per (b, j): dQ, then dK (every entry its own KV head)
      gemm_batched(b3[i], x);
      gemm_batched(b4[i], x);
    }
  }
  void attention_rowdot(float* D, const float* dout, int lddo, const float* o, int ldo, int B, int T, int NH,
                        int hs) override {
    k_attn_rowdot<<<blocks_for(size_t(B) * NH * T), 256, 0, stream_>>>(D, dout, lddo, o, ldo, B, T, NH, hs);
    MB_CHECK_LAUNCH(k_attn_rowdot, kG);
  }
  void copy_2d(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols) override {
    if (rows <= 0 || cols <= 0) return;
    MB_CHECK_CUDA(cudaMemcpy2DAsync(dst, sizeof(float) * size_t(ld_dst), src, sizeof(float) * size_t(ld_src),
                                    sizeof(float) * size_t(cols), size_t(rows), cudaMemcpyDeviceToDevice, stream_), kG);
    written(dst, sizeof(float) * size_t((rows - 1) * ld_dst + cols));
  }
  void add_2d(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols) override {
    if (rows <= 0 || cols <= 0) return;
    k_add_2d<<<blocks_for(size_t(rows) * size_t(cols)), 256, 0, stream_>>>(dst, ld_dst, src, ld_src, rows, cols);
    MB_CHECK_LAUNCH(k_add_2d, kG);
  }
  void bias_residual_add(float* out, const float* x, const float* bias, int N, int C) override {
    if (N <= 0 || C <= 0) return;
    k_bias_residual_add<<<blocks_for(size_t(N) * C), 256, 0, stream_>>>(out, x, bias, N, C);
    MB_CHECK_LAUNCH(k_bias_residual_add, kG);
    written(out, sizeof(float) * size_t(N) * C);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& cfg,
                    double wd, int t) override {
    if (n <= 0) return;
    if (!bad_) {
      MB_CHECK_CUDA(cudaMalloc(&bad_, sizeof *bad_), kG);
      MB_CHECK_CUDA(cudaMemsetAsync(bad_, 0, sizeof *bad_, stream_), kG);
    }
    const float bc1 = float(1.0 - std::pow(cfg.beta1, t));
    k_adamw<<<blocks_for(size_t(n)), 256, 0, stream_>>>(
        p, g, m, v, size_t(n), float(cfg.beta1), float(cfg.beta2), float(1.0 - cfg.beta1),
        float(1.0 - cfg.beta2), float(cfg.eps), float(1.0 - cfg.lr * wd), float(cfg.lr) / bc1,
        float(std::sqrt(1.0 - std::pow(cfg.beta2, t))), bad_);
    MB_CHECK_LAUNCH(k_adamw, kG);
    written(p, sizeof(float) * size_t(n));  // refresh the bf16 copy of an updated weight
  }

  // The MoE routing ops (moe_kernels.cuh); the expert GEMMs are matmul_forward/backward.
  void moe_topk_forward(int32_t* idx, float* gates, float* probs, const float* logits, int N, int E,
                        int k, bool assigned) override {
    if (N <= 0) return;
    k_moe_topk_fwd<<<blocks_for(size_t(N), 128), 128, 0, stream_>>>(idx, gates, probs, logits, N, E, k, assigned);
    MB_CHECK_LAUNCH(k_moe_topk_fwd, kG);
  }
  void moe_topk_backward(float* dlogits, const float* dgates, const float* dprobs, const float* probs,
                         const float* gates, const int32_t* idx, int N, int E, int k) override {
    if (N <= 0) return;
    k_moe_topk_bwd<<<blocks_for(size_t(N), 128), 128, 0, stream_>>>(dlogits, dgates, dprobs, probs, gates, idx, N, E, k);
    MB_CHECK_LAUNCH(k_moe_topk_bwd, kG);
  }
  void moe_plan(int32_t* slot, int32_t* counts, float* prob_sum, const int32_t* idx,
                const float* probs, int N, int E, int k, int capacity) override {
    const moe_plan_blocks::Plan g = moe_plan_blocks::plan(N, E, k);
    auto* hist = static_cast<int32_t*>(scratch(kMoePlan, sizeof(int32_t) * size_t(std::max<int64_t>(1, g.scratch_ints()))));
    int32_t* base = hist + g.chunks * E;
    MB_CHECK_CUDA(cudaMemsetAsync(hist, 0, sizeof(int32_t) * size_t(g.chunks) * size_t(E), stream_), kG);
    k_moe_plan_ranks<<<g.ranks.blocks, g.ranks.threads, 0, stream_>>>(slot, hist, idx, g.assignments, E);
    MB_CHECK_LAUNCH(k_moe_plan_ranks, kG);
    k_moe_plan_experts<<<g.per_expert.blocks, g.per_expert.threads, 0, stream_>>>(base, counts, prob_sum, hist, probs,
                                                                                 g.chunks, N, E);
    MB_CHECK_LAUNCH(k_moe_plan_experts, kG);
    k_moe_plan_offsets<<<g.offsets.blocks, g.offsets.threads, 0, stream_>>>(counts, E, capacity);
    MB_CHECK_LAUNCH(k_moe_plan_offsets, kG);
    k_moe_plan_slots<<<g.slots.blocks, g.slots.threads, 0, stream_>>>(slot, idx, base, counts + E, g.assignments, E);
    MB_CHECK_LAUNCH(k_moe_plan_slots, kG);
  }
  void moe_permute_forward(float* xp, const float* x, const int32_t* slot, int N, int C, int k) override {
    if (N <= 0) return;  // an expert-parallel rank that received no rows
    k_moe_permute_fwd<<<blocks_for(size_t(N) * k * C), 256, 0, stream_>>>(xp, x, slot, N, C, k);
    MB_CHECK_LAUNCH(k_moe_permute_fwd, kG);
  }
  void moe_permute_backward(float* dx, const float* dxp, const int32_t* slot, int N, int C, int k) override {
    if (N <= 0) return;
    k_moe_permute_bwd<<<blocks_for(size_t(N) * C), 256, 0, stream_>>>(dx, dxp, slot, N, C, k);
    MB_CHECK_LAUNCH(k_moe_permute_bwd, kG);
  }
  void moe_unpermute_forward(float* out, const float* yp, const float* gates, const int32_t* slot, int N,
                             int C, int k) override {
    if (N <= 0) return;
    k_moe_unpermute_fwd<<<blocks_for(size_t(N) * C), 256, 0, stream_>>>(out, yp, gates, slot, N, C, k);
    MB_CHECK_LAUNCH(k_moe_unpermute_fwd, kG);
  }
  void moe_unpermute_backward(float* dyp, float* dgates, const float* dout, const float* yp,
                              const float* gates, const int32_t* slot, int N, int C, int k) override {
    if (N == 0) return;
    k_moe_unpermute_bwd<<<unsigned(size_t(N) * k), row_threads(C), 0, stream_>>>(dyp, dgates, dout, yp, gates, slot, C, k);
    MB_CHECK_LAUNCH(k_moe_unpermute_bwd, kG);
  }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int C, int OC, bool accumulate) override {
    k_bias_rows<<<blocks_for(size_t(N) * OC), 256, 0, stream_>>>(out, bias, N, OC, accumulate);
    MB_CHECK_LAUNCH(k_bias_rows, kG);
    const MatmulShape s{N, C, OC};
    const Operands x = operands({{Array::kInp, inp}, {Array::kWeight, weight}, {Array::kOut, out}}, s);
    gemm(matmul_forward_gemm(s), x);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int C, int OC) override {
    const MatmulShape s{N, C, OC};
    // Only the GEMMs asked for read their operands (tensor parallel may still be gathering inp
    // while the input gradient is computed).
    const Operands x = operands({{Array::kDout, dout}, {Array::kInp, dweight ? inp : nullptr},
                                 {Array::kWeight, dinp ? weight : nullptr}, {Array::kDinp, dinp},
                                 {Array::kDweight, dweight}}, s);
    const auto g = matmul_backward_gemms(s);
    if (dinp != nullptr) gemm(g[0], x);
    if (dweight != nullptr) gemm(g[1], x);
    if (dbias == nullptr || N <= 0) return;
    // column sums over row tiles, then the tiles in order (defect 7: one thread per column over
    // all N rows used 3 blocks of a 132-SM GPU at C = 768)
    const ColTiles t = col_tiles(N, OC);
    float* part = static_cast<float*>(scratch(kReduceSlot, sizeof(float) * size_t(t.tiles) * OC));
    k_col_partial<<<t.grid, dim3(32, 8), 0, stream_>>>(part, dout, N, OC, t.rows);
    MB_CHECK_LAUNCH(k_col_partial, kG);
    k_col_reduce<<<blocks_for(size_t(OC)), 256, 0, stream_>>>(dbias, part, t.tiles, OC);
    MB_CHECK_LAUNCH(k_col_reduce, kG);
  }
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int KVH,
                         int hs) override {
    const AttentionShape s{B, T, NH, KVH, hs};
    Operands x = operands({{Array::kQkv, qkv}, {Array::kAtt, att}, {Array::kOut, out}}, s, Array::kAtt);
    // strided batches over the KV groups (operands.hpp attention_batches): B NH/KVH cuBLAS calls
    for (const GemmBatch& g : attention_batches(s, false, 0)) gemm_batched(g, x);
    k_causal_softmax<<<unsigned(B) * NH * T, row_threads(T), 0, stream_>>>(att, T);
    MB_CHECK_LAUNCH(k_causal_softmax, kG);
    stage(x, Array::kAtt, att, numel(s, Array::kAtt));  // P, once, for all heads
    for (const GemmBatch& g : attention_batches(s, false, 1)) gemm_batched(g, x);
  }
  // --attention flash (flash_kernels.cuh): no T x T matrix; fp32 on both precisions.
  bool flash_attention() const override { return true; }
  void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH, int KVH,
                               int hs) override {
    const FlashDims s = flash_dims(B, T, NH, KVH, hs);
    const dim3 grid(unsigned((T + flash::kRows - 1) / flash::kRows), unsigned(NH), unsigned(B));
    k_flash_fwd<<<grid, flash::kRows, sizeof(float) * 2 * flash::kTile * hs, stream_>>>(out, lse, qkv, s,
                                                                                          1.f / std::sqrt(float(hs)));
    MB_CHECK_LAUNCH(k_flash_fwd, kG);
  }
  void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                                int B, int T, int NH, int KVH, int hs) override {
    const FlashDims s = flash_dims(B, T, NH, KVH, hs);
    const float scale = 1.f / std::sqrt(float(hs));
    float* D = static_cast<float*>(scratch(kFlashD, sizeof(float) * size_t(B) * NH * T));
    k_flash_rowdot<<<blocks_for(size_t(B) * NH * T), 256, 0, stream_>>>(D, dout, out, s);
    MB_CHECK_LAUNCH(k_flash_rowdot, kG);
    const unsigned tiles = unsigned((T + flash::kRows - 1) / flash::kRows);
    k_flash_dkdv<<<dim3(tiles, unsigned(KVH), unsigned(B)), flash::kRows,
                   sizeof(float) * (2 * flash::kTile * hs + 2 * flash::kTile), stream_>>>(dqkv, dout, qkv, lse, D, s, scale);
    MB_CHECK_LAUNCH(k_flash_dkdv, kG);
    k_flash_dq<<<dim3(tiles, unsigned(NH), unsigned(B)), flash::kRows, sizeof(float) * 2 * flash::kTile * hs,
                 stream_>>>(dqkv, dout, qkv, lse, D, s, scale);
    MB_CHECK_LAUNCH(k_flash_dq, kG);
  }
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int NH, int KVH, int hs) override {
    const AttentionShape s{B, T, NH, KVH, hs};
    MB_CHECK_CUDA(cudaMemsetAsync(dqkv, 0, sizeof(float) * size_t(numel(s, Array::kDqkv)), stream_), kG);
    Operands x = operands({{Array::kDout, dout}, {Array::kQkv, qkv}, {Array::kDatt, datt},
                           {Array::kAtt, att}, {Array::kDqkv, dqkv}}, s, Array::kDatt, Array::kAtt);
    for (const GemmBatch& g : attention_batches(s, true, 0)) gemm_batched(g, x);
    k_softmax_bwd<<<unsigned(B) * NH * T, row_threads(T), 0, stream_>>>(datt, att, T);
    MB_CHECK_LAUNCH(k_softmax_bwd, kG);
    stage(x, Array::kDatt, datt, numel(s, Array::kDatt));
    stage(x, Array::kAtt, att, numel(s, Array::kAtt));
    // per (b, j): dQ, dK, dV, each a batch over the KV groups (every entry its own KV head)
    const auto b1 = attention_batches(s, true, 1), b2 = attention_batches(s, true, 2), b3 = attention_batches(s, true, 3);
    for (size_t k = 0; k < b1.size(); ++k) {
      gemm_batched(b1[k], x);
      gemm_batched(b2[k], x);
      gemm_batched(b3[k], x);
    }
  }

  // cuBLAS rates (FLOP/s) of C (M,N) = A (M,K) B (N,K)^T on this backend's precision:
  // operands are made (and, in bf16, converted) before the clock starts, and only the GEMM
  // calls are timed, by events on the stream; the best and median of at least 3 batches over 0.3 s.
  GemmTiming gemm_rate(int M, int N, int K) {
    const size_t es = p_ == Precision::kBf16 ? sizeof(__nv_bfloat16) : sizeof(float);
    void* a = alloc(es * size_t(M) * K);
    void* b = alloc(es * size_t(N) * K);
    void* c = alloc(sizeof(float) * size_t(M) * N);
    fill(a, size_t(M) * K, 1);
    fill(b, size_t(N) * K, 2);
    const GemmPlan g{false, true, M, N, K, 1.f, 0.f, {Array::kInp, 0, M, K, K},
                     {Array::kWeight, 0, N, K, K}, {Array::kOut, 0, M, N, N}};
    cudaEvent_t e0, e1;
    MB_CHECK_CUDA(cudaEventCreate(&e0), kG);
    MB_CHECK_CUDA(cudaEventCreate(&e1), kG);
    cublas(g, a, b, static_cast<float*>(c));  // warm-up: cuBLAS picks and loads its kernel
    synchronize();
    // A batch of back-to-back GEMMs between the events, long enough (about 2 ms, at least 1
    // GEMM, at most 1000) that a launch's latency does not count: one small GEMM on an idle
    // stream (the LM head of `medium` in bf16, 15-25 us) reads 25-40% below its rate.
    auto time_batch = [&](int batch) {
      MB_CHECK_CUDA(cudaEventRecord(e0, stream_), kG);
      for (int j = 0; j < batch; ++j) cublas(g, a, b, static_cast<float*>(c));
      MB_CHECK_CUDA(cudaEventRecord(e1, stream_), kG);
      MB_CHECK_CUDA(cudaEventSynchronize(e1), kG);
      float ms = 0;
      MB_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1), kG);
      return ms / 1e3;
    };
    const double one = time_batch(10) / 10;
    const int batch = static_cast<int>(std::clamp(2e-3 / std::max(one, 1e-9), 1.0, 1000.0));
    std::vector<double> rates;
    double spent = 0;
    for (int i = 0; i < 200 && (i < 3 || spent < 0.3); ++i) {
      const double s = time_batch(batch);
      spent += s;
      if (s > 0) rates.push_back(2.0 * M * N * K * batch / s);
    }
    GemmTiming t;
    t.reps = int(rates.size());
    if (!rates.empty()) {
      std::sort(rates.begin(), rates.end());
      t.best = rates.back();
      const size_t h = rates.size() / 2;
      t.median = rates.size() % 2 ? rates[h] : 0.5 * (rates[h - 1] + rates[h]);
    }
    (void)cudaEventDestroy(e0);
    (void)cudaEventDestroy(e1);
    release(a);
    release(b);
    release(c);
    return t;
  }

 private:
  struct Alloc {
    void* p;
    std::size_t bytes;
  };
  // n elements of the precision's GEMM input type, uniform in [-1, 1) from `seed` (random,
  // not constant: a GPU's clock under load depends on the data it multiplies).
  void fill(void* p, size_t n, uint64_t seed) {
    std::vector<float> h(n);
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (float& v : h) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      v = float(double(x >> 40) / double(1 << 23) - 1.0);
    }
    float* tmp = static_cast<float*>(alloc(sizeof(float) * n));
    upload(tmp, h.data(), sizeof(float) * n);
    if (p_ == Precision::kBf16) convert(static_cast<__nv_bfloat16*>(p), tmp, int64_t(n));
    else copy(static_cast<float*>(p), tmp, int64_t(n));
    release(tmp);
  }

  int device_;
  unsigned long long* bad_ = nullptr;  // k_adamw's count of non-finite gradient elements
  std::vector<Alloc> sizes_;
  static FlashDims flash_dims(int B, int T, int NH, int KVH, int hs) {
    if (hs > flash::kMaxHead)
      throw std::invalid_argument("--attention flash on cuda: head size " + std::to_string(hs) + " exceeds " +
                                  std::to_string(flash::kMaxHead) + " (the kernel's per-thread accumulators)");
    return FlashDims{B, T, NH, KVH, hs};
  }
  // Row tiles of a column sum: at least 64 rows each, at most 65535 tiles (the grid's y).
  struct ColTiles {
    int rows, tiles;
    dim3 grid;
  };
  static ColTiles col_tiles(int N, int C) {
    const int rows = std::max(64, (N + 65534) / 65535), tiles = (N + rows - 1) / rows;
    return {rows, tiles, dim3(unsigned((C + 31) / 32), unsigned(tiles))};
  }
  std::vector<float> loss_host_;
  bool defer_ = false;
  double* loss_acc_ = nullptr;  // the deferred losses' sum (defer_losses)
  std::deque<std::vector<char>> staged_;  // upload_async's host copies, until the next synchronisation
};

}  // namespace

std::string host_sync_in(Backend<float>& be, const std::function<void()>& work) {
  auto stream = static_cast<cudaStream_t>(be.stream());
  MB_CHECK_CUDA(cudaStreamSynchronize(stream), kG);
  MB_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), kG);
  std::string why;
  try {
    work();
  } catch (const std::exception& e) {
    why = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (graph) (void)cudaGraphDestroy(graph);
  if (why.empty() && end != cudaSuccess) why = std::string(cudaGetErrorName(end)) + ": " + cudaGetErrorString(end);
  (void)cudaGetLastError();
  MB_CHECK_CUDA(cudaStreamSynchronize(stream), kG);
  return why;
}

std::unique_ptr<Backend<float>> make_backend(Precision p, int device) {
  return std::make_unique<CudaBackend>(p, device);
}

GemmTiming measure_gemm_peak(int M, int N, int K, Precision p, int device) {
  CudaBackend be(p, device);
  return be.gemm_rate(M, N, K);
}

}  // namespace meshbench::parallel::cuda
