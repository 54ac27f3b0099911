// Data parallel with overlapped gradient buckets (PyTorch DDP's and Megatron's bucketed
// all-reduce; llm.c launches each layer's reduction right after its backward). The flat
// gradient array is cut into buckets from its end, the order in which the backward finishes
// it; a bucket's all-reduce over the dp x cp group is posted, non-blocking, as soon as its
// last gradient is final, and overlaps the rest of the backward. `overlap = false` posts
// every bucket after the backward instead (the ablation). Reductions are sums: the mean
// over ranks is folded into the loss scale (see loss_scale()), so no pass over the
// gradients is spent dividing them.
// MPICH progresses non-blocking collectives only inside MPI calls: Progress::kPoll tests
// the pending buckets between backward ops (the model's poll hook), Progress::kThread runs a
// thread that tests them every 50 us (needs MPI_THREAD_MULTIPLE).
// Expert parallel: the expert tensors (ExpertGrads' ranges) are different experts on the
// ranks of a dp group, so the buckets skip them and finish() all-reduces them over the expert
// data-parallel group (edp) instead, with the same loss scale (each expert's gradient already
// sums the tokens every EP rank sent it).
// Not here: ZeRO's sharded reductions (their own strategy), timing (the trace).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "model/model.hpp"
#include "common/grad_sync.hpp"
#include "common/plan.hpp"
#include "common/trace.hpp"

namespace meshbench::parallel {

// Data parallel's bytes per rank and step (the closed form): the dense gradients' all-reduce
// over the dp x cp group of d ranks, `dense_bytes` each, and the expert tensors' over edp,
// `expert_bytes` each (none where edp <= 1). DataParallel::analytic and the modelled replay
// (predict/replay.cpp) both assemble theirs here.
std::vector<AnalyticBytes> dp_analytic(uint64_t dense_bytes, int d, uint64_t expert_bytes, int edp);

// The data-parallel rules: --bucket-mb >= 0.
void validate_data_parallel(const Plan& plan);

// The gradient bucket size in elements: --bucket-mb when given, otherwise the default rule
// (a quarter of the gradient array, at least 16 Ki elements and at most Megatron's 40 M,
// rounded to 64 elements), so a small model still gets about four buckets.
int64_t bucket_elements(const Plan& plan, int64_t grad_elements, int scalar_bytes);

// The flat ranges [lo, hi) reduced over `edp` instead of dp x cp (null edp: a group of one).
struct ExpertGrads {
  comm::Communicator* edp = nullptr;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // sorted, disjoint
  int64_t elements() const;
};

template <typename S>
class DataParallel final : public GradSync<S> {
 public:
  // `dp` is the dense gradient group (dp x cp), a recording communicator; `tags` (may be
  // null) get the layer whose backward made a bucket ready.
  DataParallel(Gpt<S>& model, comm::Communicator& dp, const Plan& plan, TraceTags* tags, ExpertGrads experts = {});
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int buckets() const { return static_cast<int>(buckets_.size()); }
  int64_t bucket_elements() const { return bucket_elems_; }
  uint64_t grad_bytes() const;  // payload reduced per step: the whole flat gradient array

  // The factor each micro-batch's mean loss is scaled by in the backward, so that the summed
  // gradients are the plan's: 1/(m dp) for avg (the gradient of the global mean loss), 1/m
  // for sum (the sum over replicas of their mean losses).
  static double loss_scale(const Plan& plan);
  double loss_scale() const override { return loss_scale(plan_); }

  std::string describe() const override;
  // Before each micro-batch's backward: only the last one's gradients are reduced.
  void begin_backward(int micro, bool last) override;
  // After the last backward: posts what remains and waits for every bucket.
  void finish() override;
  void optimizer_step(const AdamWConfig& cfg, int t) override { model_.update(cfg, t); }
  std::vector<S> full_grads() override { return model_.download_grads(); }
  std::vector<S> full_params() override { return model_.download_params(); }
  void inject_fault(double delta) override { fault_ = delta; }
  std::vector<AnalyticBytes> analytic() const override;

 private:
  struct Bucket {
    int64_t lo, hi;  // elements of the flat gradient array
    std::vector<std::unique_ptr<comm::Request>> reqs;  // one per piece outside the expert ranges
  };
  void on_ready(int64_t lo, int layer);
  void post(size_t b);
  void poll();
  void progress_loop();

  Gpt<S>& model_;
  comm::Communicator& dp_;
  const Plan& plan_;
  int64_t bucket_elems_ = 0;
  std::vector<Bucket> buckets_;  // buckets_[0] holds the end of the array (ready first)
  size_t next_ = 0;              // the next bucket to post
  bool armed_ = false;
  double fault_ = 0;
  TraceTags* tags_;
  ExpertGrads experts_;
  std::mutex mu_;                // Progress::kThread: guards buckets_' requests
  std::thread progress_;
  std::atomic<bool> stop_{false};
};

extern template class DataParallel<float>;

}  // namespace meshbench::parallel
