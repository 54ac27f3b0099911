// The GPT decoder of the step engine on one host rank, wired from the layers in layers.hpp
// (llm.c's gpt2_forward / gpt2_backward / gpt2_update). Parameters, gradients and the two
// AdamW moments each live in one allocation described by one Layout; activations live in a
// second flat allocation with its own table, so memory per category is known exactly.
// Not here: timing and output (step_bench.cpp), devices (cuda/), parallel strategies.
//
// Block l (pre-norm):  res2 = res + proj(attn(qkv(ln1(res))));  res3 = res2 + fcproj(gelu(fc(ln2(res2))))
// Head: logits = lnf(res3_{L-1}) @ W^T + b, W the token embedding when tied.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "config.hpp"
#include "layers.hpp"
#include "layout.hpp"

namespace meshbench::parallel {

// Time spent per kind of op when profiling is on (seconds, summed over calls).
enum class Op { kEmbedding, kLayerNorm, kMatmul, kAttention, kGelu, kResidual, kLoss, kAdamW,
                kCount };
const char* op_name(Op op);

// One op call in the trace (--profile): what ran, where, its FLOPs (GEMMs and attention
// products; 0 for the elementwise ops) and its steady-clock start and end (seconds).
struct OpEvent {
  int step, layer;  // layer -1: embedding, final norm, head, loss, optimizer
  Op op;
  char phase;       // 'F' forward, 'B' backward, 'O' optimizer
  double flops, t_start, t_end;
};

struct MemoryBytes {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;
};

template <typename S>
class Gpt {
 public:
  explicit Gpt(const GptConfig& cfg);  // allocates everything; validate(cfg) first

  const GptConfig& config() const { return cfg_; }
  const Layout& layout() const { return layout_; }
  S* params() { return params_.data(); }
  S* grads() { return grads_.data(); }
  const S* params() const { return params_.data(); }
  const S* grads() const { return grads_.data(); }
  int64_t num_params() const;  // without padding

  // GPT-2 initialisation: N(0, 0.02) matrices and embeddings, residual projections scaled by
  // 1/sqrt(2L), norm weights 1, biases 0. Deterministic in seed.
  void init_weights(uint64_t seed);

  // tokens, targets: (B,T) in [0,V). Returns the mean loss. logits_out (B,T,V), when given,
  // receives the logits before the softmax overwrites them.
  S forward(const int32_t* tokens, const int32_t* targets, S* logits_out = nullptr);
  void zero_grad();
  // Gradients of the mean loss of the last forward() into grads() (+=, so zero_grad first).
  void backward();
  // AdamW step t (1-based) over the whole flat array, weight decay per layout entry.
  void update(const AdamWConfig& cfg, int t);

  MemoryBytes memory_allocated() const;  // sizes of the allocations actually made
  static MemoryBytes memory_analytic(const GptConfig& cfg, int64_t scalar_bytes);

  void set_profiling(bool on) { profiling_ = on; }
  void reset_profile() { op_s_.fill(0.0); }
  // With profiling on, every op call of the following steps is appended to `sink` (nullptr
  // stops it) tagged with `step`.
  void set_trace(std::vector<OpEvent>* sink, int step) {
    trace_ = sink;
    trace_step_ = step;
  }
  const std::array<double, static_cast<int>(Op::kCount)>& op_seconds() const { return op_s_; }

 private:
  struct LayerOffsets {
    int64_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w,
        fcproj_b;
  };
  struct LayerActs {
    int64_t ln1, ln1_mean, ln1_rstd, qkv, att, atty, res2, ln2, ln2_mean, ln2_rstd, fch,
        fch_gelu, res3;
  };
  template <typename F>
  void timed(Op op, F&& f, double flops = 0.0);
  const S* res_in(int l) const;

  GptConfig cfg_;
  Layout layout_;
  int64_t wte_, wpe_, lnf_w_, lnf_b_, head_w_, head_b_;
  std::vector<LayerOffsets> lo_;
  std::vector<S> params_, grads_, m_, v_;

  Layout act_layout_;  // activations cached by forward for backward
  std::vector<LayerActs> la_;
  int64_t encoded_, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_;
  std::vector<S> acts_;
  // Backward scratch (activation gradients), reused across layers.
  std::vector<S> dresid_, dln_, datty_, dqkv_, datt_, dfch_;
  std::vector<int32_t> tokens_, targets_;

  bool profiling_ = false;
  std::vector<OpEvent>* trace_ = nullptr;
  int trace_step_ = 0, trace_layer_ = -1;
  char trace_phase_ = 'F';
  std::array<double, static_cast<int>(Op::kCount)> op_s_{};
};

extern template class Gpt<float>;
extern template class Gpt<double>;

// Synthetic data: token ids from a seeded counter-based generator, so any rank can
// regenerate any sample of the global batch. Sample s of step k is T+1 ids; tokens are the
// first T, targets the last T.
enum class DataKind {
  kRandom,  // independent uniform ids per (seed, step, sample, position)
  kRepeat,  // a fixed random period-8 pattern, the same every step (learnable)
};
void synthetic_batch(int32_t* tokens, int32_t* targets, DataKind kind, uint64_t seed,
                     int64_t step, int64_t first_sample, int B, int T, int V);

}  // namespace meshbench::parallel
