// The rank gathers of a step run: the only communication on the output side. Each rank hands
// its own rows (records.hpp) and state; rank 0 gets every rank's, into one StepRecord. The
// timed loop's per-step gathers (the global loss, every rank's step time for the results
// file) are here too, watched by --op-timeout like the step's own calls.
// Not here: what the rows mean (metrics.hpp, records.hpp), output (report/).
#pragma once

#include <mpi.h>

#include <array>
#include <string>
#include <type_traits>
#include <vector>

#include "core/op_watch.hpp"
#include "expert_parallel/moe.hpp"
#include "metrics/records.hpp"

namespace meshbench::parallel {

// Rows of every rank on rank 0 (trivially copyable rows; other ranks get an empty vector).
template <typename T>
std::vector<T> gather_rows(const std::vector<T>& local, MPI_Comm comm);
// Rows of every rank on every rank.
template <typename T>
std::vector<T> allgather_rows(const std::vector<T>& local, MPI_Comm comm);

// Every rank's analytic rows summed per (dim, kind) on rank 0: all_ranks the total payload,
// wire the mean per rank.
std::vector<AnalyticBytes> sum_over_ranks(const std::vector<AnalyticBytes>& local, int ranks, MPI_Comm world);

// This rank's metrics (metrics.hpp), after every rank's pipeline posts are exchanged (the time
// split charges a pipeline call's wait for its peer to the bubble). With `pipe`, also this
// rank's stored activations and bubble beside `bubble_theory`.
RankMetrics measure_rank(const Trace& trace, int rank, double offset, MPI_Comm world, PipelineRow* pipe = nullptr,
                         double bubble_theory = 0);

// The global batch's mean loss of one step (every rank gets it).
double global_mean_loss(double mine, core::OpWatch* watch, MPI_Comm world);
// One timed step's every-rank times and phases on rank 0, for the results file.
StepPoint gather_step_point(int step, double time, const std::array<double, 4>& phases, double loss,
                            core::OpWatch* watch, MPI_Comm world);

// What one rank adds to the record at the end of the run.
struct RankPart {
  const RankMetrics* metrics = nullptr;
  double peak = 0;                        // its measured GEMM peak
  std::vector<AnalyticBytes> analytic;    // its analytic bytes per (dim, kind)
  const PipelineRow* pipeline = nullptr;  // pipeline parallel
  std::vector<MemoryRow> memory;
  std::vector<EventRow> events;           // --profile or --trace
  std::vector<SlotRow> slots;
  std::vector<PassRow> passes;
  comm::ClockOffset clock;
  MoeTotals moe;                          // with moe_on: the MoE counts
  bool moe_on = false;
  int tp = 1, ep = 1;                     // the plan's degrees: tp ranks route alike; ep > 1 adds EP rows
};

// Collective over `world`: rank 0's `rec` gains every rank's step times, phases, peaks,
// communication, analytic bytes (summed), time split, pipeline rows, memory, events, clock
// offsets, MoE and EP rows; `rec.ranks` and `rec.steps` are set here. Other ranks keep theirs.
void gather_record(StepRecord& rec, const RankPart& mine, MPI_Comm world);

// --- implementation of the templates ---
namespace detail {
// counts[r] bytes of rank r, and their displacements; the total.
int byte_layout(int mine, std::vector<int>& counts, std::vector<int>& displs, bool all, MPI_Comm comm);
}

template <typename T>
std::vector<T> gather_rows(const std::vector<T>& local, MPI_Comm comm) {
  static_assert(std::is_trivially_copyable_v<T>);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const int mine = static_cast<int>(local.size() * sizeof(T));
  std::vector<int> counts, displs;
  const int total = detail::byte_layout(mine, counts, displs, false, comm);
  std::vector<T> all(rank == 0 ? static_cast<size_t>(total) / sizeof(T) : 0);
  MPI_Gatherv(local.data(), mine, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, 0, comm);
  return all;
}

template <typename T>
std::vector<T> allgather_rows(const std::vector<T>& local, MPI_Comm comm) {
  static_assert(std::is_trivially_copyable_v<T>);
  const int mine = static_cast<int>(local.size() * sizeof(T));
  std::vector<int> counts, displs;
  const int total = detail::byte_layout(mine, counts, displs, true, comm);
  std::vector<T> all(static_cast<size_t>(total) / sizeof(T));
  MPI_Allgatherv(local.data(), mine, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, comm);
  return all;
}

}  // namespace meshbench::parallel
