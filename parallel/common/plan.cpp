#include "common/plan.hpp"

#include <algorithm>
#include <fmt/core.h>

#include "core/error.hpp"

namespace meshbench::parallel {

using core::UsageError;

const char* cp_algo_name(CpAlgo a) {
  switch (a) {
    case CpAlgo::kRing: return "ring";
    case CpAlgo::kAllGather: return "allgather";
    case CpAlgo::kUlysses: return "ulysses";
  }
  return "?";
}

PipeSchedule parse_pipe_schedule(const std::string& n) {
  if (n == "gpipe") return PipeSchedule::kGpipe;
  if (n == "1f1b") return PipeSchedule::k1F1B;
  if (n == "interleaved") return PipeSchedule::kInterleaved;
  throw core::UsageError(fmt::format("--schedule {}: must be gpipe, 1f1b or interleaved", n));
}

const char* name(PipeSchedule k) {
  switch (k) {
    case PipeSchedule::kGpipe: return "gpipe";
    case PipeSchedule::k1F1B: return "1f1b";
    case PipeSchedule::kInterleaved: return "interleaved";
  }
  return "?";
}

void resolve_plan(Plan& p, int world, const std::vector<PlanRule>& rules) {
  p.world = world;
  if (p.micro_batches < 1)
    throw UsageError(fmt::format("--micro-batches {}: must be at least 1", p.micro_batches));
  // The degrees must multiply to the world size (RankGrid names the rule it breaks).
  try {
    p.degrees = comm::RankGrid(world, p.mesh, p.order).degrees();
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("--mesh {} --order {}: {}", p.mesh_text.empty() ? "(default)" : p.mesh_text, p.order, e.what()));
  }
  for (PlanRule rule : rules) rule(p);
}

std::string describe(const Plan& p) {
  std::string pipe;
  if (p.degrees.pp > 1)
    pipe = fmt::format(", pipeline {} schedule, {} chunk{} per rank", name(p.schedule), p.vpp, p.vpp > 1 ? "s" : "");
  return fmt::format("{} (order {}), zero {}, micro-batches {}, global batch {} x {} tokens, grad-reduce {}, "
                     "overlap {}, progress {}{}{}{}",
                     comm::format_degrees(p.degrees), p.order, p.zero, p.micro_batches, p.global_batch(),
                     p.model.seq, p.grad_reduce == GradReduce::kAvg ? "avg" : "sum",
                     p.overlap ? "on" : "off", p.progress == Progress::kPoll ? "poll" : "thread",
                     p.degrees.tp > 1 ? (p.sp ? fmt::format(", sequence parallel (re-gather {})", p.sp_regather ? "on" : "off")
                                             : std::string(", tensor parallel all-reduce")) : std::string(),
                     p.degrees.cp > 1 ? fmt::format(", context parallel {} ({})", cp_algo_name(p.cp_algo),
                                                    p.cp_zigzag ? "zig-zag" : "contiguous") : std::string(),
                     pipe);
}

}  // namespace meshbench::parallel
