// The mixture-of-experts MLP of the step engine (issue 13): the wiring of the MoE ops
// (moe_layers.hpp) and the expert GEMMs over a backend, for every block whose MLP is MoE
// (GptConfig::is_moe). Gpt (model.hpp) owns one MoeMlp and calls it where a dense block runs
// fc -> gelu -> proj; this file holds the MoE blocks' parameter and activation layout
// entries, their buffers and the host side of the routing (counts, drops, aux loss).
// Expert parallel (--mesh ep=P, issue 13): each rank holds experts [r E/P, (r+1) E/P) of its
// EP group (global indices in the parameter names), routes its own tokens over all E, and
// between permute and unpermute runs
//   counts:   all-to-all of the kept rows per expert (each peer gets its E/P experts' counts)
//   dispatch: all-to-all-v of the permuted rows to their experts' owners (source-major),
//             reordered expert-major for the local experts
//   combine:  the local experts' rows reordered source-major, all-to-all-v back into the
//             sender's permuted layout, then unpermute weighted by the gates as on one rank.
// The backward sends d(yp) the dispatch way and d(xp) back the combine way.
// Expert tensor parallel (--mesh etp=T > 1, Megatron's --expert-tensor-parallel-size): each
// expert's MLP is split over the etp group, fc by rows and proj by columns. After the
// dispatch the group's rows are all-gathered (each rank's block padded to the group's
// largest), every rank runs its F/T slice of the experts on all of them, and the partial
// outputs are reduce-scattered back to the rows' owners (their block summed); the backward
// gathers d(y) the same way and reduce-scatters d(x). Under tensor parallel without --sp each
// tp rank dispatches a slice of the tokens (as with expert parallel), so no two ranks of an
// etp group hold the same row. Capacity is
// applied by each source rank to its own tokens (as the single-rank reference does per
// micro-batch), so the drops do not depend on the layout.
// Not here: the rest of the block (model.cpp), the expert gradients' reduction over edp
// (data_parallel/data_parallel.hpp).
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
// Context parallel and sequence parallel (MoeTokens): the micro-batch's N tokens are split
// over `parts` ranks (cp chunks, and the tp shards under --sp), and each rank routes and
// dispatches its own rows (Megatron's MoE under CP and SP). The aux loss stays the micro-batch's:
// routed_e and the probability sums are all-reduced over the token groups (tp, cp) before
// it, and d aux / d probs uses them. Capacity is in token order over the micro-batch, which
// no rank sees whole, so a split needs dropless routing (the plan's rule).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>
#include <utility>

#include "kernels/backend.hpp"
#include "common/config.hpp"
#include "common/layout.hpp"
#include "common/op.hpp"

namespace meshbench::parallel {

enum class Op;  // model.hpp
template <typename S>
class GroupComm;  // common/group_comm.hpp

// This rank's place in its expert-parallel group: it holds experts [rank E/size, (rank+1) E/size);
// with expert tensor parallel (etp > 1) slice etp_rank of each: fc's rows F/etp (weight and
// bias), proj's columns F/etp (its bias whole, added once).
struct EpSpec {
  int size = 1, rank = 0;
  int etp = 1, etp_rank = 0;
};

// How a micro-batch's tokens are split over ranks that run the same MoE block on different
// rows: `parts` = cp x (tp under sequence parallel); `cp`, the context-parallel share of it
// (the loss scale holds 1/cp, so the aux gradient is scaled back by cp); `sp`: sequence
// parallel (each tp rank its own rows, not the sliced all-reduce mode).
struct MoeTokens {
  int parts = 1, cp = 1;
  bool sp = false;
};

// What one MoE block's routing did in the last forward (host copies).
struct MoeRouting {
  std::vector<int32_t> routed;    // (E) assignments per expert before drops (this rank's rows)
  std::vector<double> routed_all; // (E) the micro-batch's, summed over the token groups (aux)
  std::vector<int32_t> offsets;   // (E+1) rows kept per expert, as prefix sums
  std::vector<double> prob_sum;   // (E) sum over the N rows of the router probabilities (a token split: the micro-batch's, summed over the groups)
  double aux = 0;                 // this block's aux loss term (coef included)
  int64_t dropped = 0;            // assignments dropped by capacity
  // Expert parallel: recv (P x E/P) rows received from source s for local expert j at
  // [s E/P + j]; local (E/P + 1) prefix sums of this rank's expert-major rows. One rank:
  // local = offsets, recv empty.
  std::vector<int32_t> recv, local;
  // The rows the local experts compute, as (local expert, first row, rows) runs: the local
  // rows' experts, or with etp > 1 each etp rank's block of the gathered rows in turn.
  std::vector<std::array<int64_t, 3>> runs;
  int64_t block = 0;     // etp > 1: the rows per rank of the gathered buffer (the group's largest)
  int64_t computed = 0;  // rows of the buffer the experts run over (etp x block, or local_rows)
  int64_t kept() const { return offsets.empty() ? 0 : offsets.back(); }
  int64_t local_rows() const { return local.empty() ? 0 : local.back(); }
};

// What the expert-parallel exchanges moved and took (forwards since reset_totals(); rows are
// token rows of C values, own rows included unless "remote").
struct EpTotals {
  int64_t rows_sent = 0, rows_recv = 0, remote_sent = 0, remote_recv = 0, count_calls = 0;
  // expert tensor parallel: the gathered rows (etp x block) summed over the forwards, and the
  // count gathers
  int64_t etp_rows = 0, etp_count_calls = 0;
  double counts_s = 0, dispatch_s = 0, combine_s = 0, expert_s = 0;  // forward + backward
};

// Assignments over every MoE block and forward since reset_totals() (the run's record).
struct MoeTotals {
  int64_t routed = 0, dropped = 0, forwards = 0;
  int64_t worst_expert = 0;  // the most rows any one expert kept in one block's forward
  EpTotals ep;
};

// Closed forms of what the MoE blocks change in Gpt::memory_analytic (elements or bytes as
// named), against the dense MLP they replace.
struct MoeMemory {
  int64_t param_elements = 0;     // + experts and routers - the replaced dense MLPs
  int64_t activation_bytes = 0;   // + MoE activations - the replaced fch, fch_gelu
  // one block's share of activation_bytes without its routing ints: what a block's activation
  // slot holds beyond a dense block's (pipeline slots, --recompute full's scratch)
  int64_t block_float_bytes = 0;
  int64_t buffer_bytes = 0;       // the MoE backward scratch (once, shared by the blocks)
};

// Capacity per expert (rows); 0 when dropless.
int moe_capacity(const GptConfig& c);
// Rows of the permuted buffer: N*k dropless, min(N*k, E*capacity) otherwise.
int64_t moe_rows(const GptConfig& c);
// Rows of this rank's expert-major buffer: moe_rows on one rank; with ep = P the most its
// E/P experts can receive from P sources.
int64_t moe_local_rows(const GptConfig& c, const EpSpec& ep);
// The int32 routing state of one MoE block for one micro-batch (indices, slots, counts, and
// with ep the received rows' places); a pipeline stage keeps one copy per micro-batch.
int64_t moe_routing_ints(const GptConfig& c, const EpSpec& ep = {});
// tp: the tensor-parallel degree; the replaced dense MLP is the rank's F/tp slice (the experts
// are whole on every tensor-parallel rank, etp = 1).
// tokens: a token split (context parallel, sequence parallel): the MoE terms on the rank's
// share, the replaced dense MLP on the b x s / cp rows it runs on.
MoeMemory moe_memory(const GptConfig& c, int64_t scalar_bytes, const EpSpec& ep = {}, int tp = 1,
                     const MoeTokens& tokens = {});
// Appends one MoE block's parameter entries (prefix "h.3.") where the dense MLP's would be:
// moe.router.weight (E,C), then per expert e (the global index) moe.expert.<e>.fc.weight
// (F,C), .fc.bias (F), .proj.weight (C,F), .proj.bias (C).
// With ep: only this rank's experts. pad_multiple > 1: the experts start a multiple of it past
// unit_lo (ZeRO's expert segment). Returns the offset of the first expert entry.
// The gradient elements of one MoE block that sequence parallel sums over tp (its rows are
// split, its weights not): the router, and with ep = 1 the experts after it (layout gaps
// included: one contiguous range).
int64_t moe_sp_sync_elements(const GptConfig& c, const EpSpec& ep);
// A MoE block's config on one rank of a token split (MoeTokens): seq / parts, so that
// tokens() counts the rank's rows.
GptConfig moe_local_config(const GptConfig& c, const MoeTokens& t);
int64_t moe_add_params(Layout& layout, const GptConfig& c, const std::string& prefix, const EpSpec& ep = {},
                       int64_t unit_lo = 0, int64_t pad_multiple = 1);
// The flat ranges [lo, hi) holding this rank's expert tensors (one per MoE block: its experts
// are contiguous), from the layout's names.
std::vector<std::pair<int64_t, int64_t>> moe_expert_ranges(const Layout& layout, const GptConfig& c);

template <typename S>
class MoeMlp {
 public:
  // timed(op, f, flops): the model's timer (profile, trace, poll) around one op call.
  using Timed = ComputeOp;  // op.hpp: what each op is, then the op
  // A fixed token-to-expert assignment (issue 13's routing workloads): fills idx (N,k, host)
  // for MoE block `layer` of a forward of `tokens` (host, N ids) at `step`; distinct experts
  // per row. Unset: the router's learned top-k.
  using Assignment = std::function<void(int layer, const int32_t* tokens, int step, int32_t* idx)>;

  // c: the whole micro-batch's config; with a token split the MLP runs on its share.
  explicit MoeMlp(const GptConfig& c, EpSpec ep = {}, MoeTokens tokens = {})
      : c_(moe_local_config(c, tokens)), ep_(ep), tok_(tokens), total_(c.tokens()), w_(c.layers), a_(c.layers),
        routing_(c.layers) {}

  // Construction: block `layer`'s parameters found by name in the model's layout (offsets
  // relative to its unit's start `unit_lo`), then its activations added to `acts`.
  void bind(int layer, const Layout& layout, int64_t unit_lo);
  void add_acts(int layer, Layout& acts, const std::string& prefix);
  // The integer activations (idx, slot, counts) and the host routing state, `copies` of them
  // (a pipeline stage: one per micro-batch of the step, as its token slots, since several
  // are in flight between their forward and backward), and the backward scratch.
  void allocate(Backend<S>& be, MemoryTracker* mem, int copies = 1);
  // The copy of the routing state the next forward or backward uses (a micro-batch's slot).
  void use(int copy) { cur_ = copy % copies_; }
  int64_t state_bytes() const { return ints_.bytes(); }  // every copy's integer activations
  void set_assignment(Assignment a) { assignment_ = std::move(a); }
  const Assignment& assignment() const { return assignment_; }
  // The forward's tokens (host) and step, for a fixed assignment (Gpt::forward sets them).
  void set_batch(const int32_t* tokens, int step) {
    tokens_ = tokens;
    step_ = step;
  }
  // The expert-parallel group (ep.size > 1; before the first forward).
  void set_comm(GroupComm<S>* ep) { comm_ = ep; }
  // The expert-tensor-parallel group (ep.etp > 1; before the first forward).
  void set_etp_comm(GroupComm<S>* etp) { etp_ = etp; }
  // Tensor parallel (all-reduce mode, experts whole: etp = 1): the tokens are the same on the
  // tp ranks; with expert parallel each dispatches only its 1/tp slice of them (rows
  // [N r/t, N (r+1)/t), routed and dropped over all N as on one rank) and the slices' outputs,
  // d(gates) and d(x) are all-reduced over tp. Without expert parallel every tp rank runs the
  // whole MoE (replicated).
  void set_tp_comm(GroupComm<S>* tp) { tp_ = tp; }
  // The groups the micro-batch's tokens are split over (MoeTokens: tp under --sp, cp); the
  // aux loss's statistics are summed over them. Null: none.
  void set_token_comms(GroupComm<S>* tp, GroupComm<S>* cp) {
    split_tp_ = tp;
    split_cp_ = cp;
  }
  // Block `layer`'s range that sequence parallel sums over tp (offset from the unit start,
  // elements): moe_sp_sync_elements from the router.
  std::pair<int64_t, int64_t> sp_sync_range(int layer) const {
    return {w_[static_cast<size_t>(layer)].router_w, moe_sp_sync_elements(c_, ep_)};
  }
  const EpSpec& ep() const { return ep_; }

  // out (N,C) += MoE(x). p: the block's parameters (its unit's start); acts: the model's
  // activation array. Returns the block's aux loss (also in routing(layer)).
  double forward(int layer, const S* p, S* acts, const S* x, S* out, const Timed& timed);
  // dx (N,C) = d(x) (written) from dout = d(out); parameter gradients into g (+=), the aux
  // loss's scaled by loss_scale as the rest of the loss.
  void backward(int layer, const S* p, S* g, S* acts, const S* x, const S* dout, S* dx,
                S loss_scale, const Timed& timed);

  const MoeRouting& routing(int layer) const { return routing_[static_cast<size_t>(cur_ * c_.layers + layer)]; }
  const MoeTotals& totals() const { return totals_; }
  void reset_totals() { totals_ = {}; }
  // A forward run again (--recompute full) leaves the routing and exchange counts as they were
  // before it (`before`: one forward and one backward per micro-batch, as the reports' byte
  // formulas assume); its time in the exchanges and experts stays counted.
  void keep_routing_totals(const MoeTotals& before) {
    const EpTotals t = totals_.ep;
    totals_ = before;
    totals_.ep.counts_s = t.counts_s;
    totals_.ep.dispatch_s = t.dispatch_s;
    totals_.ep.combine_s = t.combine_s;
    totals_.ep.expert_s = t.expert_s;
  }

 private:
  struct Weights {  // offsets relative to the block's unit start (bind)
    int64_t router_w = 0;
    std::vector<int64_t> fc_w, fc_b, proj_w, proj_b;
  };
  struct Acts {  // offsets in the activation array; ints: in ints_
    int64_t probs = 0, gates = 0, prob_sum = 0, xp = 0, h = 0, hg = 0, yp = 0;
    int64_t xl = 0, yl = 0;  // the local experts' rows (expert parallel; else xp, yp)
    int64_t xg = 0, yg = 0;  // etp > 1: the etp group's rows, gathered (else xl, yl)
    int64_t idx = 0, slot = 0, counts = 0, lslot = 0;  // lslot: received row -> local row
  };
  // The router's assignment step: probs, idx and gates from the logits (in probs).
  void assign(int layer, S* acts, const Timed& timed);
  // Each local expert's rows [local[j], local[j+1]) through f(j, row0, rows).
  template <typename F>
  void each_expert(int layer, F&& f) const;
  // Expert parallel: the counts exchange (fills routing recv/local, the reorder slots).
  void exchange_counts(int layer);
  // Rows [send | recv] per peer (elements: rows x C) of block `layer`'s dispatch.
  void dispatch_sizes(int layer, std::vector<int64_t>& send, std::vector<int64_t>& recv) const;
  // The token dispatcher's two exchanges (Megatron's token_dispatch / token_combine), each
  // returning the seconds its all-to-all-v took. dispatch: this rank's permuted rows
  // `permuted` (R, expert-major over all E) go to their experts' owners and land expert-major
  // over the local experts in `local`. combine: the reverse, `local` rows back to the senders'
  // permuted layout. The backward runs d(y) the dispatch way and d(x) the combine way.
  double dispatch(int layer, S* local, const S* permuted, const Timed& timed);
  double combine(int layer, S* permuted, const S* local, const Timed& timed);
  // The local experts' forward (acts' x_gathered -> y_gathered: x_local -> y_local without
  // expert tensor parallel) and backward (d: d(y) in, d(x) out, in place) over the runs.
  void experts_forward(int layer, const S* p, S* acts, const Timed& timed);
  void experts_backward(int layer, const S* p, S* g, S* acts, S* d, const Timed& timed);

  GptConfig c_;  // with a token split: this rank's share (moe_local_config)
  EpSpec ep_;
  MoeTokens tok_;
  int64_t total_;  // the micro-batch's tokens (the aux loss's N)
  GroupComm<S>* comm_ = nullptr;
  GroupComm<S>* tp_ = nullptr;
  GroupComm<S>* split_tp_ = nullptr;
  GroupComm<S>* etp_ = nullptr;
  // The runs the local experts compute (MoeRouting::runs): from the local rows, or with
  // etp > 1 after gathering the group's counts and rows (x_local into x_gathered).
  void plan_runs(int layer, S* acts);
  GroupComm<S>* split_cp_ = nullptr;
  // The micro-batch's routed counts and probability sums (token split: summed over the groups).
  void sum_over_token_groups(MoeRouting& r);
  bool sliced() const;
  // Tensor parallel x expert parallel: keeps this tp rank's slice of the kept assignments
  // (slot and routing offsets rewritten, expert-major, token order).
  void restrict_to_slice(int layer);
  const int32_t* tokens_ = nullptr;
  int step_ = 0;
  Backend<S>* be_ = nullptr;
  std::vector<Weights> w_;
  std::vector<Acts> a_;
  std::vector<MoeRouting> routing_;  // (copy, layer)
  int copies_ = 1, cur_ = 0;
  MoeRouting& route(int layer) { return routing_[static_cast<size_t>(cur_ * c_.layers + layer)]; }
  const MoeRouting& route(int layer) const { return routing(layer); }
  int32_t* ints() { return ints_.data() + cur_ * ints_total_; }
  const int32_t* ints() const { return ints_.data() + cur_ * ints_total_; }
  MoeTotals totals_;
  int64_t ints_total_ = 0;
  Assignment assignment_;
  std::vector<int32_t> host_idx_;
  BackendArray<int32_t, S> ints_;
  BackendArray<S, S> dlogits_, dgates_, dyp_, dh_, dxr_, dprobs_, zero_bias_, dbias_scratch_;
  BackendArray<S, S> recv_, dyl_, cnt_;  // expert parallel: received rows, d(local rows), counts
  BackendArray<S, S> stats_;             // token split: routed counts and probability sums (2E)
  BackendArray<S, S> dyg_, etp_cnt_, zero_c_;  // etp > 1: gathered d(y) / d(x), counts, a zero proj bias
};

extern template class MoeMlp<float>;
extern template class MoeMlp<double>;

}  // namespace meshbench::parallel
