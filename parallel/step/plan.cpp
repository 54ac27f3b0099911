#include "plan.hpp"

#include <algorithm>
#include <fmt/core.h>

#include "core/error.hpp"

namespace meshbench::parallel {

using core::UsageError;

void resolve_and_validate(Plan& p, int world) {
  p.world = world;
  if (p.micro_batches < 1)
    throw UsageError(fmt::format("--micro-batches {}: must be at least 1", p.micro_batches));
  if (p.bucket_mb < 0) throw UsageError(fmt::format("--bucket-mb {}: must be >= 0 (0: the default rule)", p.bucket_mb));
  // Dimensions whose strategies are not in this build, before the degrees are resolved.
  struct Later {
    int degree;
    const char* key;
    const char* what;
  };
  const comm::MeshSpec& m = p.mesh;
  for (const Later& l : {Later{m.tp, "tp", "tensor parallel"}, Later{m.cp, "cp", "context parallel"},
                         Later{m.ep, "ep", "expert parallel"}, Later{m.pp, "pp", "pipeline parallel"},
                         Later{m.etp, "etp", "expert tensor parallel"}})
    if (l.degree > 1)
      throw UsageError(fmt::format("--mesh {}={}: {} is not available in this build (data parallel "
                                   "only: --mesh dp=N)",
                                   l.key, l.degree, l.what));
  // The degrees must multiply to the world size (RankGrid names the rule it breaks).
  try {
    p.degrees = comm::RankGrid(world, p.mesh, p.order).degrees();
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("--mesh {} --order {}: {}", p.mesh_text.empty() ? "(default)" : p.mesh_text, p.order, e.what()));
  }
  const comm::Degrees& d = p.degrees;
  if (d.dp * d.cp != world)  // unreachable while only dp runs; kept for when cp lands
    throw UsageError(fmt::format("--mesh: dp x cp = {} must equal the world size {}", d.dp * d.cp, world));
}

int64_t bucket_elements(const Plan& p, int64_t grad_elements, int scalar_bytes) {
  int64_t n;
  if (p.bucket_mb > 0) {
    n = static_cast<int64_t>(p.bucket_mb * 1024.0 * 1024.0 / scalar_bytes);
  } else {
    constexpr int64_t kMin = 16 * 1024, kMax = 40'000'000;  // Megatron's 40 M is the cap
    n = std::clamp((grad_elements + 3) / 4, kMin, kMax);
  }
  n = std::max<int64_t>(64, (n + 63) / 64 * 64);
  return n;
}

std::string describe(const Plan& p) {
  return fmt::format("{} (order {}), micro-batches {}, global batch {} x {} tokens, grad-reduce {}, "
                     "overlap {}, progress {}",
                     comm::format_degrees(p.degrees), p.order, p.micro_batches, p.global_batch(),
                     p.model.seq, p.grad_reduce == GradReduce::kAvg ? "avg" : "sum",
                     p.overlap ? "on" : "off", p.progress == Progress::kPoll ? "poll" : "thread");
}

}  // namespace meshbench::parallel
