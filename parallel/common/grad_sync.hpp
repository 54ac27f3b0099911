// What a data-parallel strategy does to a step, as the executor sees it: data parallel
// (data_parallel.hpp) and ZeRO-1/2/3 (zero.hpp) implement it. The executor calls
// begin_forward/begin_backward before each micro-batch's passes, finish() after the last
// backward (phase G), and optimizer_step() (phase O); --check reads every rank's full
// gradients and parameters through full_grads()/full_params(); the metrics compare the
// measured communication with analytic().
// Not here: the communication itself (the strategies), timing (the trace).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.hpp"

namespace meshbench::parallel {

// The payload one rank must move per step in one (dimension, kind), from the plan's shapes.
struct AnalyticBytes {
  std::string dim, kind;  // "dp", "all_reduce" (comm::name of the collective)
  uint64_t payload = 0;   // bytes per step (S summed over calls)
  double wire = 0;        // bytes each rank sends per step, bandwidth-optimal algorithm
  // The payload per step summed over every rank, where ranks differ (pipeline stages); 0:
  // every rank moves `payload`.
  uint64_t all_ranks = 0;
  // > 0: the exact payload over the timed steps where it depends on the data (expert
  // parallel's routing): this rank's, and after sum_over_ranks every rank's; payload is then
  // the mean per step. expected_bytes prefers it.
  uint64_t total = 0;
};

template <typename S>
class GradSync {
 public:
  virtual ~GradSync() = default;
  virtual std::string describe() const = 0;  // one line for the console
  // The factor each micro-batch's mean loss is scaled by in the backward.
  virtual double loss_scale() const = 0;
  virtual void begin_forward(int micro) { (void)micro; }
  virtual void begin_backward(int micro, bool last) = 0;
  virtual void finish() = 0;
  virtual void optimizer_step(const AdamWConfig& cfg, int t) = 0;
  // Collective over the group: this rank's full gradients (after the reduction) and
  // parameters, in the model's flat layout, on the host.
  virtual std::vector<S> full_grads() = 0;
  virtual std::vector<S> full_params() = 0;
  // --inject-fault: add `delta` to one gradient element on this rank before its reduction.
  virtual void inject_fault(double delta) = 0;
  virtual std::vector<AnalyticBytes> analytic() const = 0;
  // Pipeline parallel with a tied head: whether the tied embedding's two copies (first and
  // last stage) must be summed before finish() (a strategy that reduce-scatters in place
  // leaves only its slice valid) rather than after it (an all-reduce leaves all of it).
  virtual bool sums_tied_embedding_first() const { return false; }
  // True when the gradients leave the model after every micro-batch's backward (ZeRO-3's
  // reduce-scatter per micro-batch), so that the tensor-parallel sums of replicated
  // parameters' gradients (sequence parallel's norms, the MoE router) run every micro-batch
  // rather than once after the last.
  virtual bool reduces_every_micro_batch() const { return false; }
};

}  // namespace meshbench::parallel
