// The mixture-of-experts MLP of the step engine (issue 13): the wiring of the MoE ops
// (moe_layers.hpp) and the expert GEMMs over a backend, for every block whose MLP is MoE
// (GptConfig::is_moe). Gpt (model.hpp) owns one MoeMlp and calls it where a dense block runs
// fc -> gelu -> proj; this file holds the MoE blocks' parameter and activation layout
// entries, their buffers and the host side of the routing (counts, drops, aux loss).
// Not here: the rest of the block (model.cpp), expert parallelism (later: the same plan,
// with an all-to-all between permute and the experts).
//
// One MoE MLP on N = B*T rows x (the ln2 output), out the residual stream:
//   logits = x Wr^T (no bias); probs = softmax(logits); idx = top-k(probs)  [assign()]
//   gates = probs[idx] / sum_k probs[idx]               (renormalised over the chosen k)
//   plan: expert-major rows, token order inside an expert; beyond capacity: dropped
//   xp = permute(x); yp_e = proj_e(gelu(fc_e(xp_e)))  (each expert: the dense MLP, biases)
//   out += sum over kept assignments of gates * yp       (a dropped assignment adds 0)
// Aux loss (Switch/GShard, as Megatron's switch_load_balancing_loss_func):
//   aux = coef * E * sum_e f_e * P_e,  f_e = routed_e / (N k),  P_e = mean_n probs[n, e]
//   where routed_e counts the top-k assignments to e before capacity drops; f is a constant
//   (counts), so d aux / d probs[n, e] = coef * E * routed_e / (N^2 k).
// Capacity (--capacity-factor F > 0): each expert keeps its first ceil(F * N * k / E)
// assignments in token order; F = 0 keeps all of them (dropless).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend.hpp"
#include "config.hpp"
#include "layout.hpp"

namespace meshbench::parallel {

enum class Op;  // model.hpp

// What one MoE block's routing did in the last forward (host copies).
struct MoeRouting {
  std::vector<int32_t> routed;    // (E) assignments per expert before drops
  std::vector<int32_t> offsets;   // (E+1) rows kept per expert, as prefix sums
  std::vector<double> prob_sum;   // (E) sum over the N rows of the router probabilities
  double aux = 0;                 // this block's aux loss term (coef included)
  int64_t dropped = 0;            // assignments dropped by capacity
  int64_t kept() const { return offsets.empty() ? 0 : offsets.back(); }
};

// Assignments over every MoE block and forward since reset_totals() (the run's record).
struct MoeTotals {
  int64_t routed = 0, dropped = 0, forwards = 0;
  int64_t worst_expert = 0;  // the most rows any one expert kept in one block's forward
};

// Closed forms of what the MoE blocks change in Gpt::memory_analytic (elements or bytes as
// named), against the dense MLP they replace.
struct MoeMemory {
  int64_t param_elements = 0;     // + experts and routers - the replaced dense MLPs
  int64_t activation_bytes = 0;   // + MoE activations - the replaced fch, fch_gelu
  int64_t buffer_bytes = 0;       // the MoE backward scratch (once, shared by the blocks)
};

// Capacity per expert (rows); 0 when dropless.
int moe_capacity(const GptConfig& c);
// Rows of the permuted buffer: N*k dropless, min(N*k, E*capacity) otherwise.
int64_t moe_rows(const GptConfig& c);
MoeMemory moe_memory(const GptConfig& c, int64_t scalar_bytes);
// Appends one MoE block's parameter entries (prefix "h.3.") where the dense MLP's would be:
// moe.router.weight (E,C), then per expert e (the global index) moe.expert.<e>.fc.weight
// (F,C), .fc.bias (F), .proj.weight (C,F), .proj.bias (C).
void moe_add_params(Layout& layout, const GptConfig& c, const std::string& prefix);

template <typename S>
class MoeMlp {
 public:
  // timed(op, f, flops): the model's timer (profile, trace, poll) around one op call.
  using Timed = std::function<void(Op, const std::function<void()>&, double)>;
  // A fixed token-to-expert assignment (issue 13's routing workloads): fills idx (N,k, host)
  // for MoE block `layer`; distinct experts per row. Unset: the router's learned top-k.
  using Assignment = std::function<void(int layer, int32_t* idx)>;

  explicit MoeMlp(const GptConfig& c) : c_(c), w_(c.layers), a_(c.layers), routing_(c.layers) {}

  // Construction: block `layer`'s parameters found by name in the model's layout (offsets
  // relative to its unit's start `unit_lo`), then its activations added to `acts`.
  void bind(int layer, const Layout& layout, int64_t unit_lo);
  void add_acts(int layer, Layout& acts, const std::string& prefix);
  // The integer activations (idx, slot, counts) and the backward scratch.
  void allocate(Backend<S>& be, MemoryTracker* mem);
  void set_assignment(Assignment a) { assignment_ = std::move(a); }

  // out (N,C) += MoE(x). p: the block's parameters (its unit's start); acts: the model's
  // activation array. Returns the block's aux loss (also in routing(layer)).
  double forward(int layer, const S* p, S* acts, const S* x, S* out, const Timed& timed);
  // dx (N,C) = d(x) (written) from dout = d(out); parameter gradients into g (+=), the aux
  // loss's scaled by loss_scale as the rest of the loss.
  void backward(int layer, const S* p, S* g, S* acts, const S* x, const S* dout, S* dx,
                S loss_scale, const Timed& timed);

  const MoeRouting& routing(int layer) const { return routing_[layer]; }
  const MoeTotals& totals() const { return totals_; }
  void reset_totals() { totals_ = {}; }
  // Multiply-add FLOPs of block `layer`'s expert GEMMs in the last forward (kept rows only):
  // 2 * rows * C * F per GEMM, two GEMMs; the backward is twice that.
  double expert_flops(int layer) const;

 private:
  struct Weights {  // offsets relative to the block's unit start (bind)
    int64_t router_w = 0;
    std::vector<int64_t> fc_w, fc_b, proj_w, proj_b;
  };
  struct Acts {  // offsets in the activation array; ints: in ints_
    int64_t probs = 0, gates = 0, prob_sum = 0, xp = 0, h = 0, hg = 0, yp = 0;
    int64_t idx = 0, slot = 0, counts = 0;
  };
  // The router's assignment step: probs, idx and gates from the logits (in probs).
  void assign(int layer, S* acts, const Timed& timed);
  // Each expert's rows [offsets[e], offsets[e+1]) through f(e, row0, rows).
  template <typename F>
  void each_expert(int layer, F&& f) const;

  GptConfig c_;
  Backend<S>* be_ = nullptr;
  std::vector<Weights> w_;
  std::vector<Acts> a_;
  std::vector<MoeRouting> routing_;
  MoeTotals totals_;
  int64_t ints_total_ = 0;
  Assignment assignment_;
  std::vector<int32_t> host_idx_;
  BackendArray<int32_t, S> ints_;
  BackendArray<S, S> dlogits_, dgates_, dyp_, dh_, dxr_, dprobs_, zero_bias_, dbias_scratch_;
};

extern template class MoeMlp<float>;
extern template class MoeMlp<double>;

}  // namespace meshbench::parallel
