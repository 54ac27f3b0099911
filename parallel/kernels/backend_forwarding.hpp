// A backend that hands every op and every memory call to another backend (`inner`): the base
// of a backend that changes a few of them and keeps the rest. The emulation backend
// (backend_emulated.cpp) rounds the GEMMs' and attention's operands and forwards the rest to
// the CPU backend; the NCCL fake's device backend (tests/nccl_fake/device_step_fixture.hpp)
// routes its streams and copies through the faked CUDA calls. Not forwarded: the stream, the
// flash ops, the deferred losses and the written() hook keep Backend's defaults, so a derived
// backend says for itself whether it has them.
#pragma once

#include "kernels/backend.hpp"

namespace meshbench::parallel {

template <typename S>
class ForwardingBackend : public Backend<S> {
 public:
  explicit ForwardingBackend(Backend<S>& inner) : inner_(inner) {}

  compute::MemKind mem() const override { return inner_.mem(); }
  void* alloc(std::size_t bytes) override { return inner_.alloc(bytes); }
  void release(void* p) noexcept override { inner_.release(p); }
  void upload(void* dst, const void* host, std::size_t bytes) override { inner_.upload(dst, host, bytes); }
  void download(void* host, const void* src, std::size_t bytes) override { inner_.download(host, src, bytes); }
  void zero(void* p, std::size_t bytes) override { inner_.zero(p, bytes); }
  void copy(S* dst, const S* src, int64_t n) override { inner_.copy(dst, src, n); }
  void scale(S* x, double a, int64_t n) override { inner_.scale(x, a, n); }
  void add(S* dst, const S* src, int64_t n) override { inner_.add(dst, src, n); }

  void embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int T, int C) override {
    inner_.embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tokens, int B, int T, int C) override {
    inner_.embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* weight, const S* bias, int N,
                         int C) override {
    inner_.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight, const S* mean,
                          const S* rstd, int N, int C) override {
    inner_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int C, int OC,
                      bool accumulate) override {
    inner_.matmul_forward(out, inp, weight, bias, N, C, OC, accumulate);
  }
  void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight, int N, int C,
                       int OC) override {
    inner_.matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  void attention_forward(S* out, S* att, const S* qkv, int B, int T, int NH, int KVH, int hs) override {
    inner_.attention_forward(out, att, qkv, B, T, NH, KVH, hs);
  }
  void attention_backward(S* dqkv, S* datt, const S* dout, const S* qkv, const S* att, int B, int T, int NH, int KVH,
                          int hs) override {
    inner_.attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, KVH, hs);
  }
  void gelu_forward(S* out, const S* inp, int64_t N) override { inner_.gelu_forward(out, inp, N); }
  void gelu_backward(S* dinp, const S* inp, const S* dout, int64_t N) override {
    inner_.gelu_backward(dinp, inp, dout, N);
  }
  S crossentropy_forward(S* probs, S* losses, const S* logits, const int32_t* targets, int N, int V) override {
    return inner_.crossentropy_forward(probs, losses, logits, targets, N, V);
  }
  void crossentropy_backward(S* dlogits, const S* probs, const int32_t* targets, S dloss, int N, int V) override {
    inner_.crossentropy_backward(dlogits, probs, targets, dloss, N, V);
  }
  void crossentropy_rowmax(S* rowmax, const S* logits, int N, int V, int valid) override {
    inner_.crossentropy_rowmax(rowmax, logits, N, V, valid);
  }
  void crossentropy_partial(S* probs, S* sumexp, S* tlogit, const S* logits, const S* rowmax, const int32_t* targets,
                            int N, int V, int valid) override {
    inner_.crossentropy_partial(probs, sumexp, tlogit, logits, rowmax, targets, N, V, valid);
  }
  S crossentropy_finish(S* probs, S* losses, const S* sumexp, const S* tlogit, const S* rowmax, int N,
                        int V) override {
    return inner_.crossentropy_finish(probs, losses, sumexp, tlogit, rowmax, N, V);
  }
  void bias_residual_add(S* out, const S* x, const S* bias, int N, int C) override {
    inner_.bias_residual_add(out, x, bias, N, C);
  }
  void attention_chunk_forward(S* o, int ldo, S* lse, const S* q, int ldq, const S* k, int ldk, const S* v, int ldv,
                               int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0, bool first) override {
    inner_.attention_chunk_forward(o, ldo, lse, q, ldq, k, ldk, v, ldv, B, Tq, Tk, NH, KVH, hs, q0, k0, first);
  }
  void attention_chunk_backward(S* dq, int lddq, S* dk, int lddk, S* dv, int lddv, const S* dout, int lddo,
                                const S* D, const S* lse, const S* q, int ldq, const S* k, int ldk, const S* v,
                                int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0) override {
    inner_.attention_chunk_backward(dq, lddq, dk, lddk, dv, lddv, dout, lddo, D, lse, q, ldq, k, ldk, v, ldv, B, Tq,
                                    Tk, NH, KVH, hs, q0, k0);
  }
  void attention_rowdot(S* D, const S* dout, int lddo, const S* o, int ldo, int B, int T, int NH, int hs) override {
    inner_.attention_rowdot(D, dout, lddo, o, ldo, B, T, NH, hs);
  }
  void copy_2d(S* dst, int64_t ld_dst, const S* src, int64_t ld_src, int64_t rows, int64_t cols) override {
    inner_.copy_2d(dst, ld_dst, src, ld_src, rows, cols);
  }
  void add_2d(S* dst, int64_t ld_dst, const S* src, int64_t ld_src, int64_t rows, int64_t cols) override {
    inner_.add_2d(dst, ld_dst, src, ld_src, rows, cols);
  }
  void adamw_update(S* param, const S* grad, S* m, S* v, int64_t n, const AdamWConfig& cfg, double weight_decay,
                    int t) override {
    inner_.adamw_update(param, grad, m, v, n, cfg, weight_decay, t);
  }
  int64_t take_nonfinite_grads() override { return inner_.take_nonfinite_grads(); }

  void moe_topk_forward(int32_t* idx, S* gates, S* probs, const S* logits, int N, int E, int k,
                        bool assigned) override {
    inner_.moe_topk_forward(idx, gates, probs, logits, N, E, k, assigned);
  }
  void moe_topk_backward(S* dlogits, const S* dgates, const S* dprobs, const S* probs, const S* gates,
                         const int32_t* idx, int N, int E, int k) override {
    inner_.moe_topk_backward(dlogits, dgates, dprobs, probs, gates, idx, N, E, k);
  }
  void moe_plan(int32_t* slot, int32_t* counts, S* prob_sum, const int32_t* idx, const S* probs, int N, int E, int k,
                int capacity) override {
    inner_.moe_plan(slot, counts, prob_sum, idx, probs, N, E, k, capacity);
  }
  void moe_permute_forward(S* xp, const S* x, const int32_t* slot, int N, int C, int k) override {
    inner_.moe_permute_forward(xp, x, slot, N, C, k);
  }
  void moe_permute_backward(S* dx, const S* dxp, const int32_t* slot, int N, int C, int k) override {
    inner_.moe_permute_backward(dx, dxp, slot, N, C, k);
  }
  void moe_unpermute_forward(S* out, const S* yp, const S* gates, const int32_t* slot, int N, int C, int k) override {
    inner_.moe_unpermute_forward(out, yp, gates, slot, N, C, k);
  }
  void moe_unpermute_backward(S* dyp, S* dgates, const S* dout, const S* yp, const S* gates, const int32_t* slot, int N,
                              int C, int k) override {
    inner_.moe_unpermute_backward(dyp, dgates, dout, yp, gates, slot, N, C, k);
  }

 protected:
  Backend<S>& inner_;
};

}  // namespace meshbench::parallel
