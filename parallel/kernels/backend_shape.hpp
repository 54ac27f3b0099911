// A backend that runs the model's wiring without its arithmetic: the step model reads a plan's
// op list off Gpt<S>'s own forward and backward over it (predict/op_list.cpp), at any size, a
// 405B plan included. Every layer op only counts the elements it writes (take_elements); no
// float is computed. Its memory is real host memory reserved without being committed
// (mmap MAP_NORESERVE, carved from one reservation): a buffer nothing writes costs no RAM. What the host reads back is
// computed: the bytes it uploads (token ids) and the mixture-of-experts routing, whose
// token-expert pairs come from `pairs` instead of a router (moe_topk_forward writes an
// assignment with exactly those pairs per expert, moe_plan runs the CPU kernel on it, so
// capacity drops and the host's counts are the model's own). holds_data() names the bytes
// that carry such values, which the recording groups (predict/op_list.cpp) exchange as if every
// rank of a group held the same.
// Not here: which ops a model runs (model.hpp), durations (predict/), real math (backend_cpu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "kernels/backend.hpp"

namespace meshbench::parallel {

template <typename S>
class ShapeBackend final : public Backend<S> {
 public:
  // The token-expert pairs per expert of one token holder's N tokens choosing k of E experts:
  // E integers, each in [0, N], summing to N k. Empty: spread evenly (as core::Routing's
  // balanced mode counts them).
  using Pairs = std::function<std::vector<int>(int N, int E, int k)>;
  // `stripes`: the token rows split into that many equal contiguous shares (tensor parallel's
  // sliced dispatch, moe.hpp) each see every expert alike: consecutive pairs of an expert go to
  // the shares in turn.
  explicit ShapeBackend(Pairs pairs = {}, int stripes = 1) : pairs_(std::move(pairs)), stripes_(stripes) {}
  ~ShapeBackend() override;
  ShapeBackend(const ShapeBackend&) = delete;
  ShapeBackend& operator=(const ShapeBackend&) = delete;

  // The elements the layer ops wrote since the last call (memory calls not counted but copies
  // and adds: zero, upload and download are free).
  double take_elements() {
    const double e = elements_;
    elements_ = 0;
    return e;
  }
  // Whether any of [p, p + bytes) holds a value the host wrote or the routing ops computed.
  bool holds_data(const void* p, std::size_t bytes) const;
  // [p, p + bytes) now holds such values (a recording group that exchanged them).
  void mark(const void* p, std::size_t bytes);

  std::string name() const override { return "shape"; }
  compute::MemKind mem() const override { return compute::MemKind::kDevice; }  // the host reads it by download only
  void* alloc(std::size_t bytes) override;
  void release(void*) noexcept override {}  // alloc() never reuses bytes (backend_shape.cpp)
  void upload(void* dst, const void* host, std::size_t bytes) override;
  void download(void* host, const void* src, std::size_t bytes) override;
  void zero(void* p, std::size_t bytes) override;
  void copy(S* dst, const S* src, int64_t n) override;
  void scale(S* x, double a, int64_t n) override;
  void add(S* dst, const S* src, int64_t n) override;

  void embedding_forward(S*, const int32_t*, const S*, const S*, int B, int T, int C) override { count(B, T, C); }
  void embedding_backward(S*, S*, const S*, const int32_t*, int B, int T, int C) override { count(B, T, C); }
  void layernorm_forward(S*, S*, S*, const S*, const S*, const S*, int N, int C) override { count(N, C); }
  void layernorm_backward(S*, S*, S*, const S*, const S*, const S*, const S*, const S*, int N, int C) override {
    count(N, C);
  }
  void matmul_forward(S*, const S*, const S*, const S*, int N, int, int OC, bool) override { count(N, OC); }
  void matmul_backward(S*, S*, S*, const S*, const S*, const S*, int N, int C, int) override { count(N, C); }
  void attention_forward(S*, S*, const S*, int B, int T, int NH, int, int hs) override { count(B, T, NH, hs); }
  void attention_backward(S*, S*, const S*, const S*, const S*, int B, int T, int NH, int, int hs) override {
    count(B, T, NH, hs);
  }
  bool flash_attention() const override { return true; }
  void flash_attention_forward(S*, S*, const S*, int B, int T, int NH, int, int hs) override { count(B, T, NH, hs); }
  void flash_attention_backward(S*, const S*, const S*, const S*, const S*, int B, int T, int NH, int,
                                int hs) override {
    count(B, T, NH, hs);
  }
  void gelu_forward(S*, const S*, int64_t N) override { count(N); }
  void gelu_backward(S*, const S*, const S*, int64_t N) override { count(N); }
  S crossentropy_forward(S*, S*, const S*, const int32_t*, int N, int V) override { return count(N, V), S(0); }
  void crossentropy_backward(S*, const S*, const int32_t*, S, int N, int V) override { count(N, V); }
  void crossentropy_rowmax(S*, const S*, int N, int V, int) override { count(N, V); }
  void crossentropy_partial(S*, S*, S*, const S*, const S*, const int32_t*, int N, int V, int) override {
    count(N, V);
  }
  S crossentropy_finish(S*, S*, const S*, const S*, const S*, int N, int) override { return count(N), S(0); }
  void bias_residual_add(S*, const S*, const S*, int N, int C) override { count(N, C); }
  void attention_chunk_forward(S*, int, S*, const S*, int, const S*, int, const S*, int, int B, int Tq, int,
                               int NH, int, int hs, int, int, bool) override {
    count(B, Tq, NH, hs);
  }
  void attention_chunk_backward(S*, int, S*, int, S*, int, const S*, int, const S*, const S*, const S*, int,
                                const S*, int, const S*, int, int B, int Tq, int, int NH, int, int hs, int,
                                int) override {
    count(B, Tq, NH, hs);
  }
  void attention_rowdot(S*, const S*, int, const S*, int, int B, int T, int NH, int hs) override {
    count(B, T, NH, hs);
  }
  void copy_2d(S*, int64_t, const S*, int64_t, int64_t rows, int64_t cols) override { count(rows, cols); }
  void add_2d(S*, int64_t, const S*, int64_t, int64_t rows, int64_t cols) override { count(rows, cols); }
  void adamw_update(S*, const S*, S*, S*, int64_t n, const AdamWConfig&, double, int) override { count(n); }
  int64_t take_nonfinite_grads() override { return 0; }

  void moe_topk_forward(int32_t* idx, S* gates, S* probs, const S* logits, int N, int E, int k,
                        bool assigned) override;
  void moe_topk_backward(S*, const S*, const S*, const S*, const S*, const int32_t*, int N, int E, int) override {
    count(N, E);
  }
  void moe_plan(int32_t* slot, int32_t* counts, S* prob_sum, const int32_t* idx, const S* probs, int N, int E, int k,
                int capacity) override;
  void moe_permute_forward(S*, const S*, const int32_t*, int N, int C, int k) override { count(N, k, C); }
  void moe_permute_backward(S*, const S*, const int32_t*, int N, int C, int k) override { count(N, k, C); }
  void moe_unpermute_forward(S*, const S*, const S*, const int32_t*, int N, int C, int k) override { count(N, k, C); }
  void moe_unpermute_backward(S*, S*, const S*, const S*, const S*, const int32_t*, int N, int C, int k) override {
    count(N, k, C);
  }

 private:
  template <typename... T>
  void count(T... dims) {
    elements_ += (1.0 * ... * static_cast<double>(dims));
  }
  // f(offset, bytes) for each part of [p, p + bytes) that holds data (offsets from p)
  template <typename F>
  void each_data(const void* p, std::size_t bytes, F&& f) const;
  Pairs pairs_;
  int stripes_;
  double elements_ = 0;
  std::map<void*, std::size_t> maps_;                 // reservation -> its length
  char* next_ = nullptr;                              // the current reservation's free bytes
  std::size_t left_ = 0;
  std::map<const char*, const char*> data_;           // [lo, hi) byte ranges holding values, disjoint
};

extern template class ShapeBackend<float>;

}  // namespace meshbench::parallel
