// ZeRO-1, -2 and -3 (Rajbhandari et al.; DeepSpeed's stages, Megatron's distributed
// optimizer) over the model's units (embeddings, each block, head), each a range of the flat
// array padded so that it splits evenly over the d ranks of the dp x cp group: rank r owns
// slice r of every unit, and its shard is those slices, contiguous. Each parameter is sharded
// over its own data-parallel group, as Megatron does: under tensor parallel the units are the
// rank's tensor-parallel shards, sharded again over dp x cp; with expert parallel a MoE
// block's experts are a segment of their unit (Unit::experts_lo) sharded over edp, the
// ranks holding the same experts, and the rest of the unit over dp x cp. Under pipeline
// parallel the units are the stage's and the groups the stage's, as in Megatron's distributed
// optimizer with pipeline parallel.
//   stage 1: gradients are reduce-scattered unit by unit into the shard as the backward of the
//            last micro-batch finishes each unit (overlapped, as data parallel); AdamW runs on
//            the shard (the moments exist only for it); the updated slices are all-gathered.
//   stage 2: as 1, and each unit's full gradient buffer exists only from the unit's first
//            backward until its reduce-scatter completes; the gradient shard stays.
//   stage 3: parameters are sharded too: a unit is all-gathered before its forward and again
//            before its backward and freed after use (--prefetch K gathers the next K units
//            ahead); gradients are reduce-scattered per unit as the backward produces them, on
//            every micro-batch, and accumulated in the shard. --zero3-keep-params keeps the
//            gathered units from the first forward to the last backward of a step instead
//            (the default under a pipeline, as torchtitan's FSDP with PP; --zero3-regather
//            gathers again per micro-batch). A pipeline's tied head: the unit holding wte's
//            copy accumulates its full gradient over the micro-batches and is reduce-scattered
//            once, after the embedding group has summed it.
// Not here: the bucketed all-reduce of plain data parallel (data_parallel.hpp).
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "model/model.hpp"
#include "common/grad_sync.hpp"
#include "common/plan.hpp"
#include "common/trace.hpp"

namespace meshbench::parallel {

// The ZeRO rules: --zero 0..3, --prefetch >= 0, --zero3-keep-params only with --zero 3, no
// --progress thread, and a --bucket-mb that holds the largest unit.
void validate_zero(const Plan& plan);

// The largest unit of the model (embeddings, a block, or the head) in elements, without
// padding: ZeRO reduces and gathers whole units.
int64_t largest_unit_elements(const GptConfig& c);

// How the model must be laid out and owned under ZeRO stage `stage` over d ranks (dp x cp),
// and with expert parallel over edp ranks for the experts (edp = 0: no expert segments).
GptOptions zero_model_options(int stage, int d, int edp = 0);

// The model state one rank holds, in bytes, for a flat array of `flat_elements` (this rank's:
// a pipeline stage's, unit padding included) of `scalar_bytes` each, under ZeRO stage
// `stage` (0: plain data parallel) over d ranks: params 1, grads 1, AdamW moments 2 scalars
// per element, the sharded ones divided by d (stage 1: moments; 2: and grads; 3: and params).
struct StateBytes {
  double params, grads, optimizer;
};
StateBytes zero_state_bytes(int64_t flat_elements, int scalar_bytes, int stage, int d);

// The model state of a ZeRO rank, as zero_state_bytes, with the expert segments
// (`expert_elements` of the flat elements) sharded over edp and the rest over d.
StateBytes zero_state_bytes(int64_t flat_elements, int64_t expert_elements, int scalar_bytes, int stage, int d,
                            int edp);

// The payload per rank and step (dim `dim`, "dp" or "edp") of ZeRO stage `stage` over d ranks for a flat
// array of `flat_bytes` (this rank's, a pipeline stage's under pipeline parallel) and m
// micro-batches: one reduce-scatter and one all-gather of it (stage 3: a reduce-scatter per
// micro-batch and all-gathers before every forward and backward, or once with keep_params).
// `held_bytes`: stage 3 under a pipeline with a tied head, the unit holding wte's copy; its
// micro-batches' gradients accumulate in full and are reduce-scattered once, after the
// embedding group has summed them.
std::vector<AnalyticBytes> zero_analytic(uint64_t flat_bytes, int stage, int d, int m, bool keep_params,
                                         uint64_t held_bytes = 0, const char* dim = "dp");

template <typename S>
class Zero final : public GradSync<S>, public Residency<S> {
 public:
  // `model` built with zero_model_options(plan.zero, dp.size(), edp->size()); `dp` the
  // recording dp x cp communicator, `edp` the expert data-parallel one (null without expert
  // segments). Stage 3 takes its parameter shard from the canonical weights of `seed`.
  Zero(Gpt<S>& model, comm::Communicator& dp, comm::Communicator* edp, const Plan& plan, TraceTags* tags,
       uint64_t seed);
  ~Zero() override;

  int64_t shard_elements() const { return shard_elems_; }
  int64_t padding_elements() const;  // flat elements that are unit padding, not parameters

  // GradSync
  std::string describe() const override;
  double loss_scale() const override;
  void begin_forward(int micro) override;
  void begin_backward(int micro, bool last) override;
  void finish() override;
  void optimizer_step(const AdamWConfig& cfg, int t) override;
  std::vector<S> full_grads() override;
  std::vector<S> full_params() override;
  void inject_fault(double delta) override { fault_ = delta; }
  std::vector<AnalyticBytes> analytic() const override;
  bool sums_tied_embedding_first() const override { return true; }
  bool reduces_every_micro_batch() const override { return stage_ == 3; }  // Plan::replicated_grad_syncs

  // Residency (stages 2 and 3)
  void acquire(int unit, char phase) override;
  void release(int unit, char phase) override;
  S* params(int unit) override;
  S* grads(int unit) override;

 private:
  // A unit's range sharded over one group: the whole unit over dp x cp, or with expert
  // segments its dense part over dp x cp and its experts over edp.
  struct Segment {
    int64_t lo = 0, len = 0, slice = 0, shard_off = 0;  // flat start, length, len/d, shard offset
    comm::Communicator* comm = nullptr;                 // dp x cp or edp
    int r = 0;                                          // this rank's slice
  };
  struct UnitState {
    int64_t lo = 0, len = 0;                            // flat start, length
    std::vector<Segment> segs;
    BackendArray<S, S> gathered;                        // stage 3: the unit's full parameters
    std::vector<std::unique_ptr<comm::Request>> gather; // stage 3: its pending all-gathers
    BackendArray<S, S> grad;                            // stages 2, 3: the unit's full gradients
    std::vector<std::unique_ptr<comm::Request>> rs;     // its pending reduce-scatters
    bool rs_into_scratch = false;                       // stage 3, micro-batch > 0
    bool posted = false;                                // stages 1, 2: reduced this step
    // Pipeline parallel with a tied head: the unit holds a copy of wte, summed over the
    // embedding group before its reduce-scatter, so it waits for finish().
    bool held = false;
  };
  void on_ready(int64_t lo, int layer);
  void post_reduce_scatter(int u);
  void complete_reduce_scatter(int u);
  void post_gather(int u);
  void poll();
  std::vector<int> order(char phase) const;  // the units in the order the model acquires them
  std::vector<int> order_f_, order_b_;       // order('F'), order('B'), made once
  std::vector<S> gather_full(const S* shard);  // all-gather a shard into a host flat array
  comm::View view(S* p, int64_t n) const;

  Gpt<S>& model_;
  comm::Communicator& dp_;
  comm::Communicator* edp_;
  const Plan& plan_;
  TraceTags* tags_;
  int stage_, d_;
  int64_t shard_elems_ = 0;
  std::vector<UnitState> units_;
  BackendArray<S, S> pshard_;   // stage 3: this rank's parameter slices
  BackendArray<S, S> gshard_;   // every stage: this rank's reduced gradient slices
  BackendArray<S, S> scratch_;  // stage 3, m > 1: one unit slice of a later micro-batch
  int micro_ = 0;
  bool last_ = true, armed_ = false;
  double fault_ = 0;
};

extern template class Zero<float>;

}  // namespace meshbench::parallel
