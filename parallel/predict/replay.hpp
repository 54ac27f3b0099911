// Modelled compute (issue 28; docs/modelled.md): the executor's action list of one rank run with
// its compute replaced by waits of the step model's durations and its communication issued for
// real, at the real model's sizes, on the plan's own groups. The lists are the step model's
// (op_list.hpp: rank_actions, pass_items, sync_items), so a modelled run, a prediction and a
// real run walk the same actions in the same order.
//
// What runs for real: every collective of the TP/SP, CP, EP and ZeRO-3 exchanges inside a pass,
// the pipeline's sends (posted) and receives (waited before the compute that needs them; a send
// followed by a receive is one exchange, as PipeExchange::send_then_recv), data parallel's
// buckets (posted while the last backward's compute passes each bucket's share of the
// parameters, waited at the gradient sync, as DataParallel posts them when their gradients are
// final), ZeRO's reductions and gathers (posted together, then waited), the tied embedding's
// all-reduce. Payloads are the items' S as the costs send them (Costs::wire_bytes: fp32, as the
// engine; with a cluster description a GPU's mix, bf16 activations and fp32 gradient
// reductions), sent as floats of that many bytes (MPI has no bf16 type).
// Blocking calls share one scratch buffer; the calls in flight together have their own.
//
// How it waits: consecutive compute items are one wait, until an absolute deadline; the rank
// sleeps (clock_nanosleep) to within kSpinSeconds of it and spins the rest. A sleeping rank
// leaves its core free, as a GPU's host thread is while kernels run: a --progress thread runs
// then, and under --progress poll nothing moves (no MPI call is made during a wait), which is
// the CPU executor's and an MPI-on-GPU host's behaviour.
// Uneven expert loads: pass items describe ep rank 0, the busiest (op_list.hpp); the other ep
// ranks wait the items' share of their mean rank (PassItem::idle).
// Not here: the groups (step/setup.cpp), the durations (costs.hpp), the metrics (metrics/).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <tuple>
#include <vector>

#include "pipeline_parallel/exchange.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "predict/costs.hpp"
#include "predict/op_list.hpp"
#include "common/grad_sync.hpp"
#include "common/plan.hpp"
#include "common/trace.hpp"

namespace meshbench::parallel {

inline constexpr double kSpinSeconds = 200e-6;

// The recording communicators of the dimensions the plan uses (null where it has none).
struct ReplayComms {
  comm::Communicator *dp = nullptr, *tp = nullptr, *cp = nullptr, *ep = nullptr, *edp = nullptr;
  PipeEnv* pipe = nullptr;  // pipeline parallel: the pp and embedding groups
  comm::Communicator* etp = nullptr;  // expert tensor parallel
  comm::Communicator* by_dim(const std::string& dim) const;
};

// The per-layer strategies' bytes per step of a rank holding `layers` blocks (`moe_layers` of
// them MoE), the embedding when `first` and the head when `last`: tensor, context and MoE-split
// parallel's closed forms at `sb` bytes per element. The real run's record (step/outcome.cpp)
// and the replay's both assemble theirs here.
std::vector<AnalyticBytes> layer_analytic(const Plan& plan, int sb, int layers, int moe_layers, bool first, bool last);

// Bytes of the buffers one rank allocates (scratch for blocking calls, the posted calls'
// own, the pipeline's messages), before allocating them: the memory check's figure.
uint64_t replay_buffer_bytes(const Plan& plan, int pp_rank, const Costs& costs);

class Replay {
 public:
  // `ep_rank`: this rank's index in its ep group (uneven loads); `trace` records every call.
  Replay(const Plan& plan, const Costs& costs, ReplayComms comms, int pp_rank, int ep_rank, Trace& trace);
  ~Replay();

  // One step of `actions` (this rank's list) as step `step` (-1: warm-up): the phases and calls
  // recorded into the trace when it is on, trace.step_start/step_end stamped. Returns NaN (no
  // loss: nothing is computed).
  double run_step(const std::vector<Action>& actions, int step);

  // The payload per rank and step of each dimension, from the strategies' closed forms
  // (data_parallel, zero, tensor_parallel, context_parallel, pipeline_parallel) where they
  // exist, and the op list's for expert parallel (its exchanges run at their expected sizes).
  std::vector<AnalyticBytes> analytic() const;

  uint64_t buffer_bytes() const { return scratch_.size() * 4 + posted_.size() * 4 + msg_.size() * 8; }
  const std::vector<std::string>& extrapolated() const { return extrapolated_; }

 private:
  struct Walk;  // run_step's handler of the action walk (pipeline_parallel/walk.hpp)
  const std::vector<PassItem>& pass(int chunk, char phase, bool first, bool last);
  // Runs a pass's items; `arm`: the last micro-batch's backward, which posts the buckets.
  void items(const PassItem* first, const PassItem* last, bool arm);
  void run(const std::vector<PassItem>& v, bool arm) { items(v.data(), v.data() + v.size(), arm); }
  double duration(const PassItem& it);
  void compute(const PassItem& it);
  void flush();  // waits out the compute accumulated so far
  void call(const PassItem& it);
  std::unique_ptr<comm::Request> post(const PassItem& it, float* buf);
  void post_ready(int64_t lo);
  void grad_sync();
  void posted_together(const std::vector<PassItem>& v);

  const Plan& plan_;
  const Costs& costs_;
  ReplayComms comms_;
  int pp_rank_, ep_rank_;
  Trace& tr_;
  std::map<std::tuple<int, char, bool, bool>, std::vector<PassItem>> passes_;
  SyncItems sync_;
  std::vector<float> scratch_, posted_, msg_;  // msg_: a send buffer, then a receive buffer
  double owed_ = 0;  // compute accumulated and not yet waited
  std::vector<std::pair<const PassItem*, double>> owed_items_;
  // data parallel's buckets (their pieces between expert ranges), posted in the last backward
  std::vector<PassItem> bucket_items_;
  std::vector<std::unique_ptr<comm::Request>> buckets_;
  size_t next_bucket_ = 0;
  // --progress thread: a thread tests the posted buckets every 50 us (DataParallel's)
  std::mutex mu_;
  std::atomic<bool> stop_{false};
  std::thread progress_;
  std::vector<std::unique_ptr<comm::Request>> sends_;
  std::vector<std::string> extrapolated_;
};

}  // namespace meshbench::parallel
