// The collective binaries' options: nccl-tests' vocabulary plus the suite's shared flags
// (docs/architecture.md). One CLI11 table generates --help, validates values and reads every option
// from a MESHBENCH_* environment variable (MESHBENCH_ITERS=50 for --iters).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/routing.hpp"
#include "core/stats.hpp"
#include "core/warmup.hpp"

namespace meshbench::collectives {

enum class InplaceMode { kYes, kNo, kBoth };
// kStream and kGraph: n back-to-back calls between two events on the device stream, the
// second captured once as a CUDA graph (nccl-tests' default and -G; issue 44, item 7).
enum class Timing { kIsolated, kPipelined, kWindow, kStream, kGraph };

struct Options {
  std::uint64_t min_bytes = 8;
  std::uint64_t max_bytes = 128ull << 20;
  std::uint64_t step_factor = 2;
  std::vector<std::uint64_t> sizes;        // --sizes: exactly these, ascending (else -b/-e/-f)
  int iters = 20;                          // timed iterations (the minimum unless iters_fixed)
  bool iters_fixed = false;                // -n given (flag or environment): exactly `iters`
  double min_time = 0.1;                   // seconds of timed calls per size, unless iters_fixed
  int max_iters = 1000;                    // cap on the iterations min_time may add
  int warmup = -1;                         // -1: adaptive (warmup_policy); else exactly this many
  core::WarmupPolicy warmup_policy;
  core::RankStat rank_stat = core::RankStat::kMax;
  double op_timeout = 300;                 // seconds a call may take before the watchdog aborts; 0 off
  int check = 1;
  std::vector<comm::DType> dtypes{comm::DType::kFloat};
  bool all_dtypes = false;                 // -d all: skip what the backend lacks
  std::vector<comm::RedOp> ops{comm::RedOp::kSum};
  bool all_ops = false;                    // -o all: likewise
  comm::Backend backend = comm::Backend::kMpi;
  compute::MemKind mem = compute::MemKind::kHost;
  InplaceMode inplace = InplaceMode::kBoth;
  Timing timing = Timing::kIsolated;
  int root = 0;
  std::string output;
  bool append = false;
  std::string tag;
  double time_limit = 0;                   // seconds; 0 = none
  bool quiet = false;
  int inject_fault = -1;                   // hidden: corrupt one element on this rank

  // Device mesh (issue 3): the group dimension the collective runs in.
  std::string mesh, order = "tp-cp-ep-dp-pp", group = "world", groups_file;
  int ranks_per_node = 0;

  // all_to_allv_bench (issue 13): the routing workload that fixes the per-peer counts.
  core::Routing routing{core::RoutingMode::kBalanced, 0};
  int top_k = 2, experts = 8;
  std::size_t hidden = 1024;  // elements per token
  std::uint64_t seed = 1;
};

const char* name(Timing t);
const char* name(InplaceMode m);

// Parses argv. Returns nullopt after printing --help (on `print` ranks). Throws
// core::UsageError with a message that names the option and the rule. `routed`: the binary
// takes --routing, --top-k, --experts, --hidden and --seed (all_to_allv_bench).
std::optional<Options> parse_options(const std::string& binary, bool reduces, bool rooted, int argc,
                                     char** argv, bool print, bool routed = false);

// The sizes to run, in bytes before rounding: --sizes as given (ascending, no repeats), else
// min, min*f, ... <= max (0, then 1, when min is 0).
std::vector<std::uint64_t> size_sweep(const Options& o);

}  // namespace meshbench::collectives
