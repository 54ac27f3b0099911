// Tensor parallel (Megatron-LM's column/row split, with sequence parallel): the group the
// model's linears talk through (engine/tp_layers.hpp's TpComm, here over a recording
// Communicator, so every call lands in the trace under dimension "tp"), and the bytes a
// plan must move. The model wiring itself is engine/model.cpp; the layers' mappings are
// engine/tp_layers.cpp.
// Not here: the split of the weights (layout Shard, sharding.hpp), data parallel (its own).
#pragma once

#include <memory>
#include <vector>

#include "backend.hpp"
#include "comm/communicator.hpp"
#include "grad_sync.hpp"
#include "plan.hpp"
#include "tp_layers.hpp"
#include "trace.hpp"

namespace meshbench::parallel {

template <typename S>
class TpGroup final : public TpComm<S> {
 public:
  // `comm`: the tensor-parallel group (a RecordingComm); `be`: the compute every call is ordered
  // after; `tags` (may be null): the trace tags whose layer set_layer writes.
  TpGroup(comm::Communicator& comm, Backend<S>& be, TraceTags* tags);
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  void set_layer(int layer) override {
    if (tags_) tags_->layer = layer;
  }
  void all_reduce(S* x, int64_t n) override;
  void all_reduce_max(S* x, int64_t n) override;
  void all_gather(S* full, const S* part, int64_t n_part) override;
  void reduce_scatter(S* part, const S* full, int64_t n_part) override;
  int post_all_reduce(S* x, int64_t n) override;
  int post_all_gather(S* full, const S* part, int64_t n_part) override;
  int post_reduce_scatter(S* part, const S* full, int64_t n_part) override;
  void wait(int handle) override;

 private:
  comm::View view(const S* p, int64_t n) const;
  int keep(std::unique_ptr<comm::Request> r);
  void done();  // a blocking call: its result must be there before the backend's next op
  comm::Communicator& comm_;
  Backend<S>& be_;
  TraceTags* tags_;
  std::vector<std::unique_ptr<comm::Request>> pending_;
};

// The tensor-parallel payload per rank and step of a plan (dim "tp"), from its shapes:
// without SP, 4 all-reduces of b x s x h per layer per micro-batch, plus the embedding's
// and the LM head's input gradient, plus the cross-entropy's three all-reduces of b x s;
// with SP, all-gathers and reduce-scatters instead (4 + 4 per layer, 2 more all-gathers per
// layer with --sp-regather) and the norm gradients all-reduced once per step.
std::vector<AnalyticBytes> tp_analytic(const Plan& plan, int scalar_bytes);

}  // namespace meshbench::parallel
