// Plain records that drivers hand to reporters (Google Benchmark's split: the benchmark
// produces records, reporters only format and store them). Times in seconds, bandwidths
// in decimal GB/s, sizes in bytes unless a name says elements.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/topology.hpp"  // plain data: GroupSpan, Topology

namespace meshbench::results {

enum class Placement { kOutOfPlace = 0, kInPlace = 1 };
inline const char* name(Placement p) { return p == Placement::kInPlace ? "in-place" : "out-of-place"; }

// A process group of the run (the world, or one group of a mesh dimension), with the nodes it
// spans: made by comm::describe_group, written as it is.
using GroupInfo = comm::GroupSpan;

// One table of a run: a collective at one dtype and reduction, in one group dimension.
struct Block {
  std::string collective;   // all_reduce, ...
  std::string dtype, redop; // redop "none" for collectives without a reduction
  int root = -1;            // -1 when the collective has no root
  std::string group = "world";
  int group_size = 1;       // n in the bus-bandwidth factor
  int groups = 1;           // groups running at once (the collective runs in each)
  double bus_factor = 1;    // busbw / algbw
  std::string timing;       // isolated | pipelined
  int iters = 0;            // -n: the minimum timed iterations (exact when -n was given)
  int warmup = 0;           // -w: calls, or -1 for adaptive warm-up
  std::string rank_stat = "max";  // --rank-stat: how the headline combines ranks per iteration
  std::string count_unit = "elements";  // what the count column counts (all_to_allv: tokens)
  std::array<bool, 2> runs{};          // by Placement: measured at all
  std::array<std::string, 2> why_not;  // by Placement: the backend's reason when not
};

struct PointSizes {
  std::uint64_t bytes = 0;               // nccl-tests' size S
  std::uint64_t count = 0;               // elements of S
  std::uint64_t send_bytes_per_rank = 0;
  std::uint64_t recv_bytes_per_rank = 0;
  std::uint64_t total_bytes = 0;         // sum over ranks of the bytes each rank sends
};

struct PointResult {
  bool ran = false;
  double t_median = 0, t_min = 0, t_mean = 0, t_p99 = 0, t_first = 0;  // by the block's rank_stat
  std::array<double, 4> t_by_stat{};  // rank 0: median over iterations of max, avg, min, rank 0
  int iters = 0;                // timed iterations at this size
  int warmup_calls = 0;         // warm-up calls made (after the verified first call)
  int warmup_converged = -1;    // 1 stable, 0 gave up at the cap, -1 not judged (fixed -w)
  int invalid = 0;              // --timing window: timed iterations dropped for a late start
  double algbw = 0, busbw = 0;
  std::uint64_t wrong = 0;      // summed over ranks; all ranks hold the same value
  int slowest_rank = -1;        // valid on rank 0
  std::vector<double> samples;  // rank 0: every rank's time per iteration, [iter][rank]
  std::vector<double> group_t_median;  // rank 0: per group, median of the group's slowest member
};

// One size of a block: both placements.
struct Row {
  PointSizes sizes;
  std::array<PointResult, 2> by_placement;
};

enum class RunStatus { kRunning, kOk, kFailed, kTimeout, kKilled, kHung, kDiverged };
inline const char* name(RunStatus s) {
  switch (s) {
    case RunStatus::kRunning: return "running";
    case RunStatus::kOk: return "ok";
    case RunStatus::kFailed: return "failed";
    case RunStatus::kTimeout: return "timeout";
    case RunStatus::kKilled: return "killed";
    case RunStatus::kHung: return "hung";
    case RunStatus::kDiverged: return "diverged";  // step_bench: a loss or gradient not finite
  }
  return "?";
}

}  // namespace meshbench::results
