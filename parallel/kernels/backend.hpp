// The compute backend of the step engine: the layers' operations and the memory they run
// on, behind one interface with a CPU implementation (layers.hpp: OpenBLAS + OpenMP, the
// float32 reference, also float64 for gradient checks) and a CUDA one (cuda/backend_cuda.cu:
// cuBLAS + kernels, fp32 or bf16 GEMM inputs with fp32 accumulation). The model wiring
// (model.hpp) and every parallel strategy are written once over it, as llm.c's CPU/CUDA
// pairs and ggml's backends. Buffers belong to the backend: pointers handed to an op are
// the backend's own (host memory for cpu, device memory for cuda).
// Not here: the wiring (model.hpp), communication (comm/), timing (the trace).
//
// Every op has the semantics of its namesake in layers.hpp (shapes, the accumulation rule:
// parameter gradients +=, activation gradients =, the residual stream +=). Ops are queued
// in order on the backend's stream; synchronize() waits for them. Only download() and
// crossentropy_forward's returned loss need the results on the host, and a device step defers
// even the loss (defer_losses; issue 44, item 10).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "compute/device.hpp"
#include "kernels/layers.hpp"
#include "kernels/moe_layers.hpp"

namespace meshbench::parallel {

template <typename S>
class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;             // "cpu", "cuda fp32", "cuda bf16"
  [[noreturn]] void no_flash() const {
    throw std::logic_error("--attention flash: backend " + name() + " has no flash attention yet");
  }
  virtual compute::MemKind mem() const = 0;          // where its buffers live
  virtual void* stream() const { return nullptr; }   // opaque compute stream (comm order_after)
  virtual void synchronize() {}                      // wait for every queued op
  // Called first on any other thread that touches the backend's memory or streams (CUDA: the
  // backend's device for that thread, or the thread's CUDA calls open a context on GPU 0).
  virtual void bind_thread() {}

  // Memory: zero-filled allocations, host<->backend copies (download blocks until the data
  // is on the host), fills and copies inside the backend.
  virtual void* alloc(std::size_t bytes) = 0;
  virtual void release(void* p) noexcept = 0;
  virtual void upload(void* dst, const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, const void* src, std::size_t bytes) = 0;
  // An upload queued on the stream that does not wait for it: the backend keeps its own copy
  // of the host bytes until the stream has run it (the step's token ids; issue 44, item 10).
  virtual void upload_async(void* dst, const void* host, std::size_t bytes) { upload(dst, host, bytes); }
  virtual void zero(void* p, std::size_t bytes) = 0;
  virtual void copy(S* dst, const S* src, int64_t n) = 0;
  virtual void scale(S* x, double a, int64_t n) = 0;  // x *= a
  virtual void add(S* dst, const S* src, int64_t n) = 0;  // dst += src
  // [p, p + bytes) of this backend's memory was written by something other than its ops
  // (a collective into the parameters): a backend that keeps derived copies (the CUDA bf16
  // backend's bf16 weights) refreshes them. Call it after ordering the backend after the
  // writer; the CPU backend keeps none.
  virtual void written(const void* p, std::size_t bytes) {
    (void)p;
    (void)bytes;
  }

  // The layers (layers.hpp).
  virtual void embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe,
                                 int B, int T, int C) = 0;
  virtual void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tokens, int B,
                                  int T, int C) = 0;
  virtual void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* weight,
                                 const S* bias, int N, int C) = 0;
  virtual void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                                  const S* weight, const S* mean, const S* rstd, int N,
                                  int C) = 0;
  virtual void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int C,
                              int OC, bool accumulate) = 0;
  virtual void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                               const S* weight, int N, int C, int OC) = 0;
  virtual void attention_forward(S* out, S* att, const S* qkv, int B, int T, int NH, int KVH,
                                 int hs) = 0;
  virtual void attention_backward(S* dqkv, S* datt, const S* dout, const S* qkv, const S* att,
                                  int B, int T, int NH, int KVH, int hs) = 0;
  // Attention without the T x T matrix (--attention flash, layers.hpp flash_attention_*): out
  // and the row log-sum-exp lse (B, NH, T); the backward recomputes each tile from lse. A
  // backend without it says so (the model checks flash_attention() before it is built).
  virtual bool flash_attention() const { return false; }
  virtual void flash_attention_forward(S*, S*, const S*, int, int, int, int, int) { no_flash(); }
  virtual void flash_attention_backward(S*, const S*, const S*, const S*, const S*, int, int, int, int, int) {
    no_flash();
  }
  virtual void gelu_forward(S* out, const S* inp, int64_t N) = 0;
  virtual void gelu_backward(S* dinp, const S* inp, const S* dout, int64_t N) = 0;
  // While losses are deferred (a device step: issue 44, item 10), crossentropy_forward and
  // crossentropy_finish return 0 and add their mean loss (as the S they would have returned)
  // to a sum on the device, which take_losses() reads and clears after the step; the host
  // does not wait for the loss inside the step. defer_losses(true) answers whether this
  // backend defers (the CPU backend never does: its loss is on the host already).
  virtual bool defer_losses(bool on) {
    (void)on;
    return false;
  }
  virtual double take_losses() { return 0.0; }
  // Mean loss over the N rows (the one op whose result the host reads).
  virtual S crossentropy_forward(S* probs, S* losses, const S* logits, const int32_t* targets,
                                 int N, int V) = 0;
  virtual void crossentropy_backward(S* dlogits, const S* probs, const int32_t* targets, S dloss,
                                     int N, int V) = 0;
  // Vocabulary-parallel cross-entropy in three steps (layers.hpp); finish's mean loss is read
  // on the host.
  virtual void crossentropy_rowmax(S* rowmax, const S* logits, int N, int V, int valid) = 0;
  virtual void crossentropy_partial(S* probs, S* sumexp, S* tlogit, const S* logits, const S* rowmax,
                                    const int32_t* targets, int N, int V, int valid) = 0;
  virtual S crossentropy_finish(S* probs, S* losses, const S* sumexp, const S* tlogit, const S* rowmax,
                                int N, int V) = 0;
  virtual void bias_residual_add(S* out, const S* x, const S* bias, int N, int C) = 0;
  // Context parallel: attention between sequence chunks with the log-sum-exp merge, its
  // backward, and strided 2-D copies for packing blocks (layers.hpp).
  virtual void attention_chunk_forward(S* o, int ldo, S* lse, const S* q, int ldq, const S* k, int ldk,
                                       const S* v, int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs,
                                       int q0, int k0, bool first) = 0;
  virtual void attention_chunk_backward(S* dq, int lddq, S* dk, int lddk, S* dv, int lddv, const S* dout,
                                        int lddo, const S* D, const S* lse, const S* q, int ldq, const S* k,
                                        int ldk, const S* v, int ldv, int B, int Tq, int Tk, int NH, int KVH,
                                        int hs, int q0, int k0) = 0;
  virtual void attention_rowdot(S* D, const S* dout, int lddo, const S* o, int ldo, int B, int T, int NH,
                                int hs) = 0;
  virtual void copy_2d(S* dst, int64_t ld_dst, const S* src, int64_t ld_src, int64_t rows, int64_t cols) = 0;
  virtual void add_2d(S* dst, int64_t ld_dst, const S* src, int64_t ld_src, int64_t rows, int64_t cols) = 0;
  virtual void adamw_update(S* param, const S* grad, S* m, S* v, int64_t n,
                            const AdamWConfig& cfg, double weight_decay, int t) = 0;
  // The gradient elements adamw_update found not finite since the last call (then zero):
  // every strategy's optimizer reads exactly its rank's reduced gradients there, so this is
  // the divergence check's view of the gradient. Outside timed regions (it may synchronize).
  virtual int64_t take_nonfinite_grads() = 0;

  // The mixture-of-experts ops (moe_layers.hpp; the wiring is moe.hpp). moe_plan's counts are
  // what the host reads (download) to size the per-expert GEMMs.
  virtual void moe_topk_forward(int32_t* idx, S* gates, S* probs, const S* logits, int N, int E,
                                int k, bool assigned) = 0;
  virtual void moe_topk_backward(S* dlogits, const S* dgates, const S* dprobs, const S* probs,
                                 const S* gates, const int32_t* idx, int N, int E, int k) = 0;
  virtual void moe_plan(int32_t* slot, int32_t* counts, S* prob_sum, const int32_t* idx,
                        const S* probs, int N, int E, int k, int capacity) = 0;
  virtual void moe_permute_forward(S* xp, const S* x, const int32_t* slot, int N, int C, int k) = 0;
  virtual void moe_permute_backward(S* dx, const S* dxp, const int32_t* slot, int N, int C, int k) = 0;
  virtual void moe_unpermute_forward(S* out, const S* yp, const S* gates, const int32_t* slot, int N,
                                     int C, int k) = 0;
  virtual void moe_unpermute_backward(S* dyp, S* dgates, const S* dout, const S* yp, const S* gates,
                                      const int32_t* slot, int N, int C, int k) = 0;
};

// The CPU backend (host memory, layers.hpp). One process-wide instance per scalar type.
template <typename S>
Backend<S>& cpu_backend();

// Bytes allocated per category, now and at their peak (per rank), for the memory table:
// every BackendArray that names a tracker is counted while it lives.
enum class MemCat { kParams, kGrads, kOptimizer, kActivations, kBuffers, kCount };
struct MemoryTracker {
  std::array<int64_t, static_cast<int>(MemCat::kCount)> now{}, peak{};
  int64_t total_now = 0, total_peak = 0;
  void add(MemCat c, int64_t bytes) {
    const int i = static_cast<int>(c);
    now[i] += bytes;
    peak[i] = std::max(peak[i], now[i]);
    total_now += bytes;
    total_peak = std::max(total_peak, total_now);
  }
  void reset_peaks() {
    peak = now;
    total_peak = total_now;
  }
};

// An owned array of T in a backend's memory (RAII over Backend::alloc/release), counted by
// an optional tracker under its category.
template <typename T, typename S>
class BackendArray {
 public:
  BackendArray() = default;
  BackendArray(Backend<S>& be, int64_t n, MemoryTracker* tracker = nullptr, MemCat cat = MemCat::kBuffers)
      : be_(&be), n_(n), p_(static_cast<T*>(be.alloc(sizeof(T) * static_cast<std::size_t>(n)))),
        tracker_(tracker), cat_(cat) {
    if (tracker_) tracker_->add(cat_, static_cast<int64_t>(bytes()));
  }
  ~BackendArray() { reset(); }
  void reset() {
    if (be_ != nullptr && p_ != nullptr) be_->release(p_);
    if (tracker_ && p_ != nullptr) tracker_->add(cat_, -static_cast<int64_t>(bytes()));
    p_ = nullptr;
    n_ = 0;
  }
  BackendArray(BackendArray&& o) noexcept : be_(o.be_), n_(o.n_), p_(o.p_), tracker_(o.tracker_), cat_(o.cat_) {
    o.p_ = nullptr;
    o.n_ = 0;
  }
  BackendArray& operator=(BackendArray&& o) noexcept {
    std::swap(be_, o.be_);
    std::swap(n_, o.n_);
    std::swap(p_, o.p_);
    std::swap(tracker_, o.tracker_);
    std::swap(cat_, o.cat_);
    return *this;
  }
  BackendArray(const BackendArray&) = delete;
  BackendArray& operator=(const BackendArray&) = delete;

  // A pooled array (kept for reuse, not in use): its bytes leave the tracker's count until
  // track() counts them again.
  void untrack() {
    if (tracker_ && p_ != nullptr) tracker_->add(cat_, -static_cast<int64_t>(bytes()));
    tracker_ = nullptr;
  }
  void track(MemoryTracker* tracker, MemCat cat) {
    untrack();
    tracker_ = tracker;
    cat_ = cat;
    if (tracker_ && p_ != nullptr) tracker_->add(cat_, static_cast<int64_t>(bytes()));
  }

  T* data() const { return p_; }
  int64_t size() const { return n_; }
  std::size_t bytes() const { return sizeof(T) * static_cast<std::size_t>(n_); }

 private:
  Backend<S>* be_ = nullptr;
  int64_t n_ = 0;
  T* p_ = nullptr;
  MemoryTracker* tracker_ = nullptr;
  MemCat cat_ = MemCat::kBuffers;
};

}  // namespace meshbench::parallel
