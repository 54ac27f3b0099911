// The CPU backend: host memory and the layers of layers.cpp (OpenBLAS + OpenMP). float is
// the engine's reference path, double serves the gradient checks.
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "kernels/backend.hpp"

namespace meshbench::parallel {
namespace {

template <typename S>
class CpuBackend final : public Backend<S> {
 public:
  std::string name() const override { return "cpu"; }
  compute::MemKind mem() const override { return compute::MemKind::kHost; }

  // 64-byte aligned, zeroed (a cache line; OpenBLAS and the simd loops like it).
  void* alloc(std::size_t bytes) override {
    const std::size_t n = (bytes + 63) / 64 * 64;
    void* p = n ? std::aligned_alloc(64, n) : nullptr;
    if (n && p == nullptr) throw std::bad_alloc();
    if (p) std::memset(p, 0, n);
    return p;
  }
  void release(void* p) noexcept override { std::free(p); }
  void upload(void* dst, const void* host, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, host, bytes);
  }
  void download(void* host, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(host, src, bytes);
  }
  void zero(void* p, std::size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  void copy(S* dst, const S* src, int64_t n) override {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
  void scale(S* x, double a, int64_t n) override {
    const S s = static_cast<S>(a);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
  }

  void add(S* dst, const S* src, int64_t n) override {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
  }

  void embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int T,
                         int C) override {
    parallel::embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tokens, int B, int T,
                          int C) override {
    parallel::embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* weight, const S* bias,
                         int N, int C) override {
    parallel::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                          const S* weight, const S* mean, const S* rstd, int N, int C) override {
    parallel::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int C, int OC,
                      bool accumulate) override {
    parallel::matmul_forward(out, inp, weight, bias, N, C, OC, accumulate);
  }
  void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                       int N, int C, int OC) override {
    parallel::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  void attention_forward(S* out, S* att, const S* qkv, int B, int T, int NH, int KVH,
                         int hs) override {
    parallel::attention_forward(out, att, qkv, B, T, NH, KVH, hs);
  }
  bool flash_attention() const override { return true; }
  void flash_attention_forward(S* out, S* lse, const S* qkv, int B, int T, int NH, int KVH, int hs) override {
    parallel::flash_attention_forward(out, lse, qkv, B, T, NH, KVH, hs);
  }
  void flash_attention_backward(S* dqkv, const S* dout, const S* qkv, const S* out, const S* lse, int B, int T, int NH,
                                int KVH, int hs) override {
    parallel::flash_attention_backward(dqkv, dout, qkv, out, lse, B, T, NH, KVH, hs);
  }
  void attention_backward(S* dqkv, S* datt, const S* dout, const S* qkv, const S* att, int B, int T,
                          int NH, int KVH, int hs) override {
    parallel::attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, KVH, hs);
  }
  void gelu_forward(S* out, const S* inp, int64_t N) override { parallel::gelu_forward(out, inp, N); }
  void gelu_backward(S* dinp, const S* inp, const S* dout, int64_t N) override {
    parallel::gelu_backward(dinp, inp, dout, N);
  }
  S crossentropy_forward(S* probs, S* losses, const S* logits, const int32_t* targets, int N,
                         int V) override {
    return parallel::crossentropy_forward(probs, losses, logits, targets, N, V);
  }
  void crossentropy_backward(S* dlogits, const S* probs, const int32_t* targets, S dloss, int N,
                             int V) override {
    parallel::crossentropy_backward(dlogits, probs, targets, dloss, N, V);
  }
  void crossentropy_rowmax(S* rowmax, const S* logits, int N, int V, int valid) override {
    parallel::crossentropy_rowmax(rowmax, logits, N, V, valid);
  }
  void crossentropy_partial(S* probs, S* sumexp, S* tlogit, const S* logits, const S* rowmax,
                            const int32_t* targets, int N, int V, int valid) override {
    parallel::crossentropy_partial(probs, sumexp, tlogit, logits, rowmax, targets, N, V, valid);
  }
  S crossentropy_finish(S* probs, S* losses, const S* sumexp, const S* tlogit, const S* rowmax, int N,
                        int V) override {
    return parallel::crossentropy_finish(probs, losses, sumexp, tlogit, rowmax, N, V);
  }
  void attention_chunk_forward(S* o, int ldo, S* lse, const S* q, int ldq, const S* k, int ldk, const S* v,
                               int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0,
                               bool first) override {
    parallel::attention_chunk_forward(o, ldo, lse, q, ldq, k, ldk, v, ldv, B, Tq, Tk, NH, KVH, hs, q0, k0, first);
  }
  void attention_chunk_backward(S* dq, int lddq, S* dk, int lddk, S* dv, int lddv, const S* dout, int lddo,
                                const S* D, const S* lse, const S* q, int ldq, const S* k, int ldk, const S* v,
                                int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0) override {
    parallel::attention_chunk_backward(dq, lddq, dk, lddk, dv, lddv, dout, lddo, D, lse, q, ldq, k, ldk, v, ldv, B, Tq, Tk,
                                  NH, KVH, hs, q0, k0);
  }
  void attention_rowdot(S* D, const S* dout, int lddo, const S* o, int ldo, int B, int T, int NH,
                        int hs) override {
    parallel::attention_rowdot(D, dout, lddo, o, ldo, B, T, NH, hs);
  }
  void copy_2d(S* dst, int64_t ld_dst, const S* src, int64_t ld_src, int64_t rows, int64_t cols) override {
    parallel::copy_2d(dst, ld_dst, src, ld_src, rows, cols);
  }
  void add_2d(S* dst, int64_t ld_dst, const S* src, int64_t ld_src, int64_t rows, int64_t cols) override {
    parallel::add_2d(dst, ld_dst, src, ld_src, rows, cols);
  }
  void bias_residual_add(S* out, const S* x, const S* bias, int N, int C) override {
    parallel::bias_residual_add(out, x, bias, N, C);
  }
  void adamw_update(S* param, const S* grad, S* m, S* v, int64_t n, const AdamWConfig& cfg,
                    double weight_decay, int t) override {
    nonfinite_ += parallel::adamw_update(param, grad, m, v, n, cfg, weight_decay, t);
  }
  int64_t take_nonfinite_grads() override { return std::exchange(nonfinite_, 0); }

  void moe_topk_forward(int32_t* idx, S* gates, S* probs, const S* logits, int N, int E, int k,
                        bool assigned) override {
    parallel::moe_topk_forward(idx, gates, probs, logits, N, E, k, assigned);
  }
  void moe_topk_backward(S* dlogits, const S* dgates, const S* dprobs, const S* probs,
                         const S* gates, const int32_t* idx, int N, int E, int k) override {
    parallel::moe_topk_backward(dlogits, dgates, dprobs, probs, gates, idx, N, E, k);
  }
  void moe_plan(int32_t* slot, int32_t* counts, S* prob_sum, const int32_t* idx, const S* probs,
                int N, int E, int k, int capacity) override {
    parallel::moe_plan(slot, counts, prob_sum, idx, probs, N, E, k, capacity);
  }
  void moe_permute_forward(S* xp, const S* x, const int32_t* slot, int N, int C, int k) override {
    parallel::moe_permute_forward(xp, x, slot, N, C, k);
  }
  void moe_permute_backward(S* dx, const S* dxp, const int32_t* slot, int N, int C, int k) override {
    parallel::moe_permute_backward(dx, dxp, slot, N, C, k);
  }
  void moe_unpermute_forward(S* out, const S* yp, const S* gates, const int32_t* slot, int N, int C,
                             int k) override {
    parallel::moe_unpermute_forward(out, yp, gates, slot, N, C, k);
  }
  void moe_unpermute_backward(S* dyp, S* dgates, const S* dout, const S* yp, const S* gates,
                              const int32_t* slot, int N, int C, int k) override {
    parallel::moe_unpermute_backward(dyp, dgates, dout, yp, gates, slot, N, C, k);
  }

 private:
  int64_t nonfinite_ = 0;  // adamw_update's count since take_nonfinite_grads (one caller thread)
};

}  // namespace

template <typename S>
Backend<S>& cpu_backend() {
  static CpuBackend<S> be;
  return be;
}

template Backend<float>& cpu_backend<float>();
template Backend<double>& cpu_backend<double>();

}  // namespace meshbench::parallel
