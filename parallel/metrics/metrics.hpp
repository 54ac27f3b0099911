// Metrics of a parallel step, derived from the trace alone (docs/architecture.md "The parallel step"):
// per rank and timed step the step time, its phases and its time split; per (dimension, kind)
// of communication the calls, bytes, busy time (the union of the calls' [t_start, t_end]
// intervals) and exposed time; then, on rank 0, the step time as the maximum over ranks, the
// straggler, tokens/s, FLOP/s and MFU.
//
// The time split, the one definition of exposed time (docs/metrics.md): every instant of a
// rank's step, from its start to its end on that rank, is charged to exactly one of
//   compute   inside a compute op (the model's ops, the optimizer's included);
//   bubble    else, blocked on a pipeline send or receive before its peer posted the match
//             (the rank waits for another stage: pipeline idle, not communication);
//   exposed   else, blocked on a communication call of a dimension: a blocking call's whole
//             duration, a posted call's posting and its wait() from blocking to completion,
//             a pipeline call's from its peer's post on; an instant blocked on k calls at once
//             (of one dimension or several) is charged 1/k to each, never twice;
//   other     the rest: the executor, copies, polls, host work between ops.
// So step = compute + the sum of exposed over dimensions + bubble + other on every rank, and a
// group of one rank is charged nothing (it issues no call). A posted call that completes while
// the rank computes costs nothing: that is overlap.
// Not here: recording (trace.hpp), gathering (gather.hpp), output (report/).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/trace.hpp"

namespace meshbench::parallel {

inline constexpr std::array<const char*, 4> kPhaseNames = {"forward", "backward", "grad_sync",
                                                           "optimizer"};

// One rank's communication of one (dim, kind), summed over the timed steps.
struct CommRow {
  int32_t rank = 0;
  char dim[16] = {};  // dp, pp, embedding, ...
  char kind[24] = {};
  uint64_t calls = 0, bytes = 0;  // bytes: payload S summed over calls
  double wire_bytes = 0, busy_s = 0, exposed_s = 0;  // exposed_s: its share of the time split
};

// One rank's time split (above), means per timed step in seconds.
struct TimeSplit {
  double step = 0, compute = 0, bubble = 0, other = 0;
  std::map<std::string, double> exposed;  // per dimension
  double exposed_total() const;
};

// One (rank, category) of step/time_split: "step", "compute", "exposed.<dim>", "bubble", "other".
struct SplitRow {
  int32_t rank = 0;
  char category[24] = {};
  double seconds = 0;  // per timed step
};
std::vector<SplitRow> split_rows(const TimeSplit& s, int rank);

// A pipeline send's or receive's post time on the common clock (local - offset,
// comm/clock_sync.hpp), exchanged after the run so each side can split its blocked time at
// its peer's post: keyed by (step, pp group, tag, 's' or 'r'); a tag is unique within a step.
struct P2pPost {
  int32_t step, group, tag;
  char dir;  // 's' send, 'r' receive
  double t_post;
};
std::vector<P2pPost> p2p_posts(const Trace& trace, double offset);

struct RankMetrics {
  std::vector<double> step_time;             // [steps]
  std::vector<std::array<double, 4>> phases;  // [steps][kPhaseNames]
  std::vector<CommRow> comm;
  TimeSplit split;
};

// `offset`: this rank's clock offset; `posts`: every rank's p2p_posts (gather.hpp measure_rank).
RankMetrics rank_metrics(const Trace& trace, int rank, double offset, const std::vector<P2pPost>& posts);
// The kind column of a call: the collective's name, or "send"/"recv" for point-to-point.
std::string comm_kind(const CommEvent& e);
// One step's phase times (kPhaseNames order), summed over its spans.
std::array<double, 4> step_phases(const Trace& trace, int step);

// Length of the union of intervals, and of its part outside `cover` (a union too).
struct Interval {
  double a, b;
};
double union_length(std::vector<Interval> v);
double uncovered_length(std::vector<Interval> v, std::vector<Interval> cover);

// One pipeline rank's stored activations and bubble, over the timed steps (means per step).
// bubble is the time split's bubble over its step (the share of the rank's step it stood
// blocked on a peer stage), beside the theory (P-1)/(m+P-1), interleaved (P-1)/(V m+P-1);
// recv_wait_s and recv_transfer_s split its receives' [post, completion] at the sender's post.
struct PipelineRow {
  int32_t rank = 0, peak_held = 0;
  int64_t peak_activation_bytes = 0;
  double bubble = 0, bubble_theory = 0, recv_wait_s = 0, recv_transfer_s = 0;
};
PipelineRow pipeline_row(const Trace& trace, int rank, double offset, const TimeSplit& split,
                         const std::vector<P2pPost>& posts, double theory);

}  // namespace meshbench::parallel
