// The GPT decoder of the step engine, wired once over a compute backend (backend.hpp: CPU
// or CUDA) in the manner of llm.c's gpt2_forward / gpt2_backward / gpt2_update. Parameters,
// gradients and the two AdamW moments each live in one backend allocation described by one
// Layout; activations live in a second flat allocation with its own table, so memory per
// category is known exactly. The backward reports each range of the flat gradient array as
// soon as it is final (BackwardHooks), so a data-parallel reducer can start on it.
// Not here: timing and output (step/), the layers themselves (backends), communication.
//
// Block l (pre-norm):  res2 = res + proj(attn(qkv(ln1(res))));  res3 = res2 + fcproj(gelu(fc(ln2(res2))))
// Head: logits = lnf(res3_{L-1}) @ W^T + b, W the token embedding when tied.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "context_parallel/attention.hpp"
#include "expert_parallel/moe.hpp"
#include "kernels/backend.hpp"
#include "kernels/layers.hpp"
#include "tensor_parallel/linear.hpp"
#include "common/config.hpp"
#include "common/layout.hpp"
#include <memory>
#include <string>

namespace meshbench::parallel {


struct MemoryBytes {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;
};

// What the backward tells its caller as it goes: grads_ready(lo, hi, layer) once the
// gradients of the flat range [lo, hi) (elements; layer -1 outside the blocks) are final, in the order the backward
// produces them (the end of the layout first, the embeddings last); poll() after every op,
// so pending non-blocking communication can make progress.
struct BackwardHooks {
  std::function<void(int64_t lo, int64_t hi, int layer)> grads_ready;
  std::function<void()> poll;
};

// A unit: a range of the flat parameter (and gradient) array that a sharded strategy
// gathers, reduces and frees as one: the embeddings (wte, wpe), each block, the head (final
// norm, LM head bias and untied weight), in layout order.
struct Unit {
  std::string name;  // "embed", "h.3", "head"
  int64_t lo, hi;    // elements; hi - lo is a multiple of GptOptions::unit_multiple
  // GptOptions::expert_segments, a MoE block: where its experts start (a unit_multiple past lo);
  // [experts_lo, hi) is the segment ZeRO shards over edp. -1: none.
  int64_t experts_lo = -1;
};

// A pipeline stage (pipeline parallel): the global layer ranges [lo, hi) this rank holds,
// one per model chunk in chunk order, and whether it holds the embeddings (the first stage)
// and the final norm, head and loss (the last). Blocks keep their global names ("h.<l>."),
// so a stage's tensors compare with the whole model's by name. A tied head on a last stage
// without the embeddings holds its own copy of wte (in the head unit), which the pipeline
// keeps equal to the first stage's by all-reducing its gradient over the embedding group.
struct StageSpec {
  std::vector<std::pair<int, int>> chunks;
  bool first = true, last = true;
  int micro_batches = 1;  // micro-batches in flight at most (token and target slots)
};

// This rank's place in the tensor-parallel group and how the group communicates. Every
// tensor's slice is recorded in its layout entry (layout.hpp, Shard): query and key/value
// heads, the MLP width and the (padded) vocabulary are divided by `size`.
struct TpSpec {
  int size = 1, rank = 0;
  TpMode mode;
};

// The local sizes of a rank of a tensor-parallel group of `size` (tensor_parallel/linear.hpp).
struct TpDims {
  int heads, kv_heads, ffn, attn_width, qkv;  // NH/t, KVH/t, F/t, C/t, (NH/t + 2 KVH/t) hs
  int vocab, vocab_valid, vocab_first;        // Vp/t rows (Vp: V padded to a multiple of t), real rows, first
  int tokens;                                 // this rank's token rows: B T, or B T / cp
  int rows;                                   // rows of the residual stream: tokens, or tokens / t with SP
};
TpDims tp_dims(const GptConfig& c, const TpSpec& tp, const CpSpec& cp = {});

// How the model's flat arrays are laid out and owned.
struct GptOptions {
  int64_t unit_multiple = 1;  // pad each unit's length to a multiple of this (ZeRO: 16 x dp)
  bool own_params = true;     // false: a Residency holds the parameters (ZeRO-3)
  bool own_grads = true;      // false: a Residency holds the gradients (ZeRO-2, ZeRO-3)
  bool own_optimizer = true;  // false: no moments until set_optimizer_shard (ZeRO-1..3)
  // ZeRO with expert parallel: a MoE block's experts start a segment of the unit, padded as
  // the unit is, so that ZeRO shards them over edp and the rest over dp x cp (Unit::experts_lo).
  bool expert_segments = false;
  TpSpec tp;                  // tensor parallel (set_tp_comm before the first step when size > 1)
  CpSpec cp;                  // context parallel (set_cp_comm likewise): this rank's chunks of the sequence
  EpSpec ep;                  // expert parallel (set_ep_comm likewise): this rank's experts (moe.hpp)
  // --attention flash: attention without the T x T matrix, a log-sum-exp per row and head
  // kept instead of the probabilities (the backend must have it; context parallel has its own)
  bool flash = false;
  // --recompute selective (no context parallel): the probabilities (flash: the row log-sum-exp)
  // are not kept per layer; the attention core's forward runs again before its backward, into
  // model-wide scratch (att_scratch_, and atty_scratch_ for the materialised output; flash
  // writes its output again where the forward left the same values)
  bool recompute_attention = false;
  // --recompute full: the first `recompute_blocks` blocks of each model chunk keep only their
  // output (res3) per micro-batch; the rest of such a block's activations live in one
  // model-wide scratch (the block being worked on) and its forward runs again before its
  // backward (Megatron's --recompute-granularity full --recompute-method block). 0: none.
  int recompute_blocks = 0;
  // Pipeline stage; none: the whole model as one chunk with one activation slot held for
  // the model's life. With a stage, activations live in slots per (chunk, micro-batch):
  // taken at the chunk's forward (stage_input), freed at the end of its backward.
  std::optional<StageSpec> stage;
};

// How the model's MoE blocks split the micro-batch's tokens (moe.hpp): over context
// parallel's chunks, and under sequence parallel over the tensor-parallel shards too.
inline MoeTokens moe_tokens(const TpSpec& tp, const CpSpec& cp) {
  const int c = std::max(1, cp.size), s = tp.size > 1 && tp.mode.sp ? tp.size : 1;
  return MoeTokens{c * s, c, s > 1};
}
inline MoeTokens moe_tokens(const GptOptions& o) { return moe_tokens(o.tp, o.cp); }

// Where a unit's parameters and gradients live while the model uses them. acquire(u, phase)
// comes before the model reads unit u in phase 'F' or 'B', release(u, phase) after it is
// done with it; params(u) and grads(u) point at element u.lo of the unit's arrays (the
// gradients are accumulated, +=). Without a residency the model's own flat arrays serve.
template <typename S>
class Residency {
 public:
  virtual ~Residency() = default;
  virtual void acquire(int unit, char phase) = 0;
  virtual void release(int unit, char phase) = 0;
  virtual S* params(int unit) = 0;
  virtual S* grads(int unit) = 0;
};

template <typename S>
class Gpt {
 public:
  // Allocates everything in `be`'s memory; validate(cfg) first.
  explicit Gpt(const GptConfig& cfg, Backend<S>& be = cpu_backend<S>(), GptOptions opts = {});

  const GptConfig& config() const { return cfg_; }
  const Layout& layout() const { return layout_; }
  Backend<S>& backend() const { return *be_; }
  // The flat arrays in the backend's memory (host pointers only on the CPU backend).
  S* params() { return params_.data(); }
  S* grads() { return grads_.data(); }
  const S* params() const { return params_.data(); }
  const S* grads() const { return grads_.data(); }
  std::vector<S> download_params() const;
  std::vector<S> download_grads() const;
  void upload_params(const S* host);  // layout().total() elements
  // The gradient of flat element `offset`, wherever it lives now: the model's flat array, or
  // the residency's buffer of the unit holding it (ZeRO-2: between its first backward and
  // its reduce-scatter). A unit's elements are contiguous from there.
  S* grads_at(int64_t offset);
  int64_t num_params() const;  // without padding
  const std::vector<Unit>& units() const { return units_; }
  void set_residency(Residency<S>* r) { residency_ = r; }
  void set_tp_comm(GroupComm<S>* tp) {
    tp_ = tp;
    moe_.set_tp_comm(tp);
    moe_.set_token_comms(opts_.tp.mode.sp ? tp_ : nullptr, cp_);
  }
  void set_cp_comm(GroupComm<S>* cp) {
    cp_ = cp;
    moe_.set_token_comms(opts_.tp.mode.sp ? tp_ : nullptr, cp_);
  }
  void set_ep_comm(GroupComm<S>* ep) { moe_.set_comm(ep); }
  void set_etp_comm(GroupComm<S>* etp) { moe_.set_etp_comm(etp); }
  const CpSpec& cp() const { return opts_.cp; }
  const TpSpec& tp() const { return opts_.tp; }
  const EpSpec& ep() const { return opts_.ep; }
  const TpDims& tp_dims() const { return dims_; }
  // The phase the model's ops and calls run in now: 'F', 'B' ('F' again while a backward
  // recomputes a forward), 'O'.
  char trace_phase() const { return trace_phase_; }
  // --recompute selective as this model runs it (without context parallel): the materialised
  // attention's probabilities, or flash's log-sum-exp, not kept per layer
  bool recompute_attention() const { return opts_.recompute_attention && opts_.cp.size <= 1; }
  // --recompute full: block l keeps only its output and runs its forward again before its backward
  bool recomputed(int l) const { return recompute_[static_cast<size_t>(l)] != 0; }
  // The full (unsharded, unpadded) model's parameter layout: the reference every rank's
  // entries are sliced from and gathered back to by name (sharding.hpp).
  static Layout full_layout(const GptConfig& cfg);
  // The elements of the flat parameter array a rank built with `opts` holds (its layout's
  // total: tensor-parallel slices, its experts, its pipeline stage, ZeRO's unit padding), from
  // the parameter table alone: nothing is allocated (step/plan_memory.hpp).
  static int64_t flat_elements(const GptConfig& cfg, const GptOptions& opts);
  // The canonical initial weights (see init_weights) as a host array of layout().total():
  // the full model's weights from the seed, this rank's slices taken by name.
  std::vector<S> canonical_weights(uint64_t seed) const;

  // GPT-2 initialisation: N(0, 0.02) matrices and embeddings, residual projections scaled by
  // 1/sqrt(2L), norm weights 1, biases 0. Deterministic in seed; the Adam moments restart.
  void init_weights(uint64_t seed);

  // tokens, targets: host (B,T) in [0,V). Returns the mean loss plus the MoE blocks' aux
  // losses (moe.hpp; 0 for a dense model). logits_out (host, B,T,V),
  // when given, receives the logits before the softmax overwrites them.
  S forward(const int32_t* tokens, const int32_t* targets, S* logits_out = nullptr);
  void zero_grad();
  // Gradients of loss_scale x the mean loss of the last forward() into grads() (+=, so
  // zero_grad first; gradient accumulation over m micro-batches uses loss_scale 1/m).
  // sync_replicated: the last micro-batch of the step, after which sequence parallel
  // all-reduces the norm weights' gradients (computed on sequence shards) over the group.
  void backward(S loss_scale = S(1), bool sync_replicated = true);
  void set_hooks(BackwardHooks hooks) { hooks_ = std::move(hooks); }

  // Pipeline stage (GptOptions::stage; without one: chunk 0, micro-batch 0 is the whole
  // model and forward/backward above are these calls). stage_input takes the activation
  // slot of (chunk, micro) if not yet taken and returns its input (B,T,C): the received
  // activations go there (the first stage's chunk 0 embeds into it instead).
  // forward_chunk returns the chunk's part of the micro-batch's loss: the aux losses of its
  // MoE blocks (0 for a dense chunk), plus the mean cross-entropy on the last stage's last
  // chunk, so the parts summed over every chunk of every stage are forward()'s; its output
  // activations stay at stage_output until the backward. backward_chunk starts from the
  // loss (last chunk of the last stage) or from `dout`, the gradient of the chunk's output
  // (B,T,C), and writes the gradient of its input to `din` (the first stage's chunk 0 runs
  // the embedding backward instead), then frees the slot.
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  std::pair<int, int> chunk_layers(int chunk) const { return chunks_[static_cast<size_t>(chunk)]; }
  bool first_stage() const { return embed_unit_ >= 0; }
  bool last_stage() const { return head_unit_ >= 0; }
  S* stage_input(int chunk, int micro);
  const S* stage_output(int chunk, int micro) const;
  S forward_chunk(int chunk, int micro, const int32_t* tokens, const int32_t* targets, S* logits_out = nullptr);
  void backward_chunk(int chunk, int micro, S loss_scale, const S* dout, S* din, bool sync_replicated = true);
  int slots_held() const { return static_cast<int>(slots_.size()); }
  int64_t slot_elements(int chunk) const { return act_layouts_[static_cast<size_t>(chunk)].total(); }
  // AdamW step t (1-based) over the whole flat array, weight decay per layout entry.
  void update(const AdamWConfig& cfg, int t);
  // A shard of the optimizer: moments for `elements` elements (zeroed).
  void set_optimizer_shard(int64_t elements);
  // AdamW step t over pieces of the flat array held wherever a strategy keeps them: piece k
  // covers the flat range [lo, hi), its parameters and gradients start at params and grads
  // (element lo), its moments at moment_off in this model's moments (set_optimizer_shard).
  struct OptPiece {
    int64_t lo, hi;
    S* params;
    const S* grads;
    int64_t moment_off;
  };
  void update_pieces(const std::vector<OptPiece>& pieces, const AdamWConfig& cfg, int t);

  MemoryBytes memory_allocated() const;  // the model's allocations now
  MemoryTracker& memory() { return mem_; }  // also counts a residency's buffers
  const MemoryTracker& memory() const { return mem_; }
  // `flash`: --attention flash (a log-sum-exp per row and head instead of the T x T matrix).
  // `recompute_blocks`: --recompute full's first blocks (GptOptions::recompute_blocks) of the
  // whole model as one chunk.
  static MemoryBytes memory_analytic(const GptConfig& cfg, int64_t scalar_bytes, const TpSpec& tp = {},
                                     const CpSpec& cp = {}, const EpSpec& ep = {}, bool flash = false,
                                     bool recompute_attention = false, int recompute_blocks = 0);

  void set_profiling(bool on) { profiling_ = on; }
  void reset_profile() { op_s_.fill(0.0); }
  // Every op call of the following steps is appended to `sink` (nullptr stops it) tagged
  // with `step` and micro-batch `micro`. On a device backend the host times are enqueue
  // times unless the clock is given (set_clock: events on the backend's stream around each
  // op, OpEvent::mark_start/mark_end, resolved after the step; issue 44, item 6) or
  // profiling is on (which synchronises around each op).
  void set_trace(std::vector<OpEvent>* sink, int step, int micro = 0) {
    trace_ = sink;
    trace_step_ = step;
    trace_micro_ = micro;
  }
  void set_clock(compute::DeviceClock* clock) { clock_ = clock; }
  const std::array<double, static_cast<int>(Op::kCount)>& op_seconds() const { return op_s_; }
  // The MoE blocks (routing statistics of the last forward, a fixed assignment).
  MoeMlp<S>& moe() { return moe_; }
  const MoeMlp<S>& moe() const { return moe_; }

 private:
  // The norm parameters lead each block, so sequence parallel all-reduces them as one range.
  struct LayerOffsets {
    int64_t ln1_w, ln1_b, ln2_w, ln2_b, qkv_w, qkv_b, proj_w, proj_b, fc_w, fc_b, fcproj_w,
        fcproj_b;
  };
  struct LayerActs {
    int64_t ln1, ln1_mean, ln1_rstd, qkv, att, atty, res2, ln2, ln2_mean, ln2_rstd, fch,
        fch_gelu, res3;
    int64_t ln1_full = -1, ln2_full = -1;  // SP without re-gathering: the gathered inputs
  };
  // The parameter table (layout, units, offsets) for a configuration and options.
  struct ParamTable {
    Layout layout;
    std::vector<Unit> units;
    int64_t wte = 0, wpe = 0, lnf_w = 0, lnf_b = 0, head_w = 0, head_b = 0;
    std::vector<LayerOffsets> lo;  // by global layer
    std::vector<int> bu;           // the unit of block l; -1: not on this stage
    int embed_unit = -1, head_unit = -1;
  };
  static ParamTable param_table(const GptConfig& cfg, const GptOptions& opts);
 public:
  // The flat elements of the expert segments (GptOptions::expert_segments; 0 without).
  static int64_t expert_segment_elements(const GptConfig& cfg, const GptOptions& opts);
  // The units (embeddings, each block, head) of a rank with options `opts`: what ZeRO reduces
  // and gathers, and the step model (predict/) times.
  static std::vector<Unit> units_of(const GptConfig& cfg, const GptOptions& opts) { return param_table(cfg, opts).units; }
  static Layout layout_of(const GptConfig& cfg, const GptOptions& opts) { return param_table(cfg, opts).layout; }
  // --recompute full: the blocks (by global layer, 1: recomputed) a rank with `opts` recomputes,
  // the first opts.recompute_blocks of each of its model chunks: what the model, its memory
  // estimate, the step model's op list and the hardware FLOPs all read.
  static std::vector<char> recomputed_blocks(const GptConfig& cfg, const GptOptions& opts);
 private:
  void build_activations();
  void allocate_buffers(int64_t blk_elements);
  // The gathered column-parallel input of layer l's qkv (which 0) or fc (1), or the head's
  // (l = -1), under sequence parallel; null otherwise.
  S* gathered(int l, int which);
  void embed_forward(const S* pe);
  S head_forward(S* logits_out);
  void head_backward(S loss_scale, bool sync_replicated);
  void embed_backward();
  void block_forward(int l);
  void block_backward(int l, bool sync_replicated);
  // sequence parallel: the norm gradients [lo, lo + n) of a unit summed over the group
  void sync_norm_grads(S* g, int64_t n);
  template <typename F>
  void timed(Op op, F&& f, double flops = 0.0);
  template <typename F>
  void timed(const OpInfo& info, const char* role, F&& f);
  // The runner of one linear's (or the attention's, or a MoE block's) ops, recording `role`.
  ComputeOp runner(const char* role);
  // What the tensor-parallel linears time their ops with, one per role (runner()).
  ComputeOp qkv_op_, proj_op_, fc_op_, fcproj_op_, head_op_;
  const S* res_in(int l) const;  // block l's input in the current slot (a_)
  // Where block l's activations other than its output live: the slot (a_), or under --recompute
  // full the scratch of the block being worked on (blk_).
  S* block_base(int l) { return recomputed(l) ? blk_.data() : a_; }
  void recompute_forward(int l);  // --recompute full: block l's forward again, before its backward
  S* take_slot(int chunk, int micro);
  void use(int chunk, int micro);  // (chunk, micro)'s slot and token ids become current

  void grads_ready(int64_t lo, int64_t hi) {
    if (hooks_.grads_ready) hooks_.grads_ready(lo, hi, trace_layer_);
  }
  // Unit u's parameters and gradients, as pointers to flat element units_[u].lo.
  void acquire(int u, char phase) {
    if (residency_) residency_->acquire(u, phase);
  }
  void release(int u, char phase) {
    if (residency_) residency_->release(u, phase);
  }
  const S* P(int u) { return residency_ ? residency_->params(u) : params_.data() + units_[u].lo; }
  S* G(int u) { return residency_ ? residency_->grads(u) : grads_.data() + units_[u].lo; }
  int head_unit() const { return head_unit_; }

  GptConfig cfg_;
  Backend<S>* be_;
  GptOptions opts_;
  TpDims dims_;
  GroupComm<S>* tp_ = nullptr;
  GroupComm<S>* cp_ = nullptr;
  std::unique_ptr<CpAttention<S>> cp_attn_;  // context parallel's attention (cp > 1)
  ComputeOp attention_op_;                   // what it times its ops with
  MemoryTracker mem_;
  Residency<S>* residency_ = nullptr;
  std::vector<Unit> units_;
  Layout layout_;
  // Offsets relative to their unit's start: wte_, wpe_ in the embedding unit; lnf_*, head_b_
  // (and head_w_ when untied) in the head unit; LayerOffsets in their block's unit.
  int64_t wte_, wpe_, lnf_w_, lnf_b_, head_w_, head_b_;
  std::vector<LayerOffsets> lo_;
  // Flat ranges whose gradients one part of the backward finishes: [lo, hi) elements.
  std::vector<std::pair<int64_t, int64_t>> layer_range_;
  std::pair<int64_t, int64_t> head_range_, lnf_range_, embed_range_;
  BackendArray<S, S> params_, grads_, m_, v_;

  // The stage: layer ranges per chunk, the unit of each held block (bu_[l], -1: not held),
  // the embedding and head units (-1: not on this stage), whether the tied head reads the
  // embedding unit's wte (tied_embed_) or its own copy.
  std::vector<std::pair<int, int>> chunks_;
  std::vector<int> bu_;
  std::vector<char> chunk_start_;  // chunk_start_[l]: block l is its chunk's first
  int embed_unit_ = -1, head_unit_ = -1, token_slots_ = 1;
  bool tied_embed_ = false;
  // Activations cached by forward for backward, one layout per chunk (offsets within a slot;
  // la_ by global layer): the chunk's input at offset 0, its blocks, the head's on the last.
  std::vector<Layout> act_layouts_;
  std::vector<LayerActs> la_;
  int64_t encoded_ = 0, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, lnf_full_ = -1;
  std::map<std::pair<int, int>, BackendArray<S, S>> slots_;  // (chunk, micro) -> activations
  // Freed slots kept for the next micro-batch of their chunk (pipeline stages): a new slot
  // reuses one, zeroed, instead of a fresh allocation whose first touch faults every page in
  // (26 MB per micro-batch on the small model's last stage: 7-16% of a pipeline step here,
  // measured as `other`). Not counted as held (the tracker's activations are the slots in use).
  std::map<int, std::vector<BackendArray<S, S>>> free_slots_;
  S* a_ = nullptr;  // the slot in use
  int32_t *tok_ = nullptr, *tgt_ = nullptr;  // the token and target ids of the micro-batch in use
  int token_slot_ = 0;                        // and their token slot
  // Backward scratch (activation gradients), reused across layers.
  BackendArray<S, S> dresid_, dln_, datty_, dqkv_, datt_, dfch_;
  BackendArray<S, S> att_scratch_, atty_scratch_;  // --recompute selective
  // --recompute full: which blocks (by global layer), the scratch of the block being worked on,
  // and per token slot the host token ids and step of its forward (a MoE block's fixed routing
  // assignment reads them again when the block is recomputed)
  std::vector<char> recompute_;
  BackendArray<S, S> blk_;
  std::vector<std::vector<int32_t>> slot_tokens_;
  std::vector<int> slot_step_;
  // Tensor parallel: row-parallel outputs before their reduction; SP gathers and the
  // cross-entropy's per-row statistics (max, sum of exponentials, target logit).
  BackendArray<S, S> row_scratch_, dxfull_, dyfull_, gather_, ce_stats_;
  BackendArray<int32_t, S> tokens_, targets_;
  BackwardHooks hooks_;
  MoeMlp<S> moe_;
  double moe_aux_ = 0;  // the MoE blocks' aux losses of the current forward
  S loss_scale_ = S(1);  // the current backward's (the MoE aux loss's gradient)
  typename MoeMlp<S>::Timed moe_timed();

  bool profiling_ = false;
  std::vector<OpEvent>* trace_ = nullptr;
  compute::DeviceClock* clock_ = nullptr;  // set_clock
  int trace_step_ = 0, trace_micro_ = 0, trace_layer_ = -1;
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
