// Metrics of a parallel step, derived from the trace alone (DESIGN.md "The parallel step"):
// per rank and timed step the step time and phases; per (dimension, kind) of communication
// the calls, bytes, busy time (the union of the calls' [t_start, t_end] intervals) and
// exposed time (busy time not covered by any compute op on that rank); then, on rank 0, the
// step time as the maximum over ranks, the straggler, tokens/s, FLOP/s and MFU.
// Not here: recording (trace.hpp) or output (step_h5, console in step_bench).
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "trace.hpp"

namespace meshbench::parallel {

inline constexpr std::array<const char*, 4> kPhaseNames = {"forward", "backward", "grad_sync",
                                                           "optimizer"};

// One rank's communication of one (dim, kind), summed over the timed steps.
struct CommRow {
  int32_t rank = 0;
  char dim[16] = {};  // dp, pp, embedding, ...
  char kind[24] = {};
  uint64_t calls = 0, bytes = 0;  // bytes: payload S summed over calls
  double wire_bytes = 0, busy_s = 0, exposed_s = 0;
};

struct RankMetrics {
  std::vector<double> step_time;             // [steps]
  std::vector<std::array<double, 4>> phases;  // [steps][kPhaseNames]
  std::vector<CommRow> comm;
};

RankMetrics rank_metrics(const Trace& trace, int rank);
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

// Pipeline parallel. Times on the common clock (local - offset, comm/clock_sync.hpp).
// A send's post time, so the receiving rank can split its receive into the wait (before the
// sender posted) and the transfer (after): exchanged after the run, nothing rides on the
// messages themselves. Keyed by (step, pp group, tag): a tag is unique within a step.
struct SendPost {
  int32_t step, group, tag;
  double t_post;
};
std::vector<SendPost> send_posts(const Trace& trace, double offset);

// Per timed step, this rank's [start of its first forward, end of its last backward].
std::vector<Interval> pass_windows(const Trace& trace, double offset);

// One pipeline rank's stored activations and bubble, over the timed steps (means per step).
// span[s] is step s's pipeline span: the earliest first forward to the latest last
// backward over all ranks. bubble = (span - compute - exposed receive transfer) / span,
// compute the union of this rank's forward and backward passes inside the span, the
// exposed receive transfer the part of each receive after its sender posted that no
// compute covers; bubble_window counts only the idle time inside this rank's own window
// (first forward to last backward), over the same span. Theory: (P-1)/(m+P-1), interleaved
// (P-1)/(V m+P-1).
struct PipelineRow {
  int32_t rank = 0, peak_held = 0;
  int64_t peak_activation_bytes = 0;
  double bubble = 0, bubble_window = 0, bubble_theory = 0, recv_wait_s = 0, recv_transfer_s = 0;
};
PipelineRow pipeline_row(const Trace& trace, int rank, double offset, const std::vector<Interval>& span,
                         const std::vector<SendPost>& sends, double theory);
double bubble_theory(int stages, int micro_batches, int chunks);

// Rows of every rank on rank 0 (trivially copyable rows; other ranks get an empty vector).
template <typename T>
std::vector<T> gather_rows(const std::vector<T>& local, MPI_Comm comm) {
  static_assert(std::is_trivially_copyable_v<T>);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int mine = static_cast<int>(local.size() * sizeof(T));
  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<size_t>(r)] = total;
    total += counts[static_cast<size_t>(r)];
  }
  std::vector<T> all(rank == 0 ? static_cast<size_t>(total) / sizeof(T) : 0);
  MPI_Gatherv(local.data(), mine, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, 0,
              comm);
  return all;
}

// Rows of every rank on every rank.
template <typename T>
std::vector<T> allgather_rows(const std::vector<T>& local, MPI_Comm comm) {
  static_assert(std::is_trivially_copyable_v<T>);
  int size = 1;
  MPI_Comm_size(comm, &size);
  const int mine = static_cast<int>(local.size() * sizeof(T));
  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<size_t>(r)] = total;
    total += counts[static_cast<size_t>(r)];
  }
  std::vector<T> all(static_cast<size_t>(total) / sizeof(T));
  MPI_Allgatherv(local.data(), mine, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, comm);
  return all;
}

}  // namespace meshbench::parallel
