#include "vocab/plan.hpp"

#include <algorithm>
#include <fmt/core.h>

#include "core/error.hpp"

namespace meshbench::parallel {

using core::UsageError;

namespace {
void validate_pipeline(const Plan& p);
}

void resolve_and_validate(Plan& p, int world) {
  p.world = world;
  if (p.micro_batches < 1)
    throw UsageError(fmt::format("--micro-batches {}: must be at least 1", p.micro_batches));
  if (p.bucket_mb < 0) throw UsageError(fmt::format("--bucket-mb {}: must be >= 0 (0: the default rule)", p.bucket_mb));
  if (p.zero < 0 || p.zero > 3) throw UsageError(fmt::format("--zero {}: must be 0, 1, 2 or 3", p.zero));
  if (p.prefetch < 0) throw UsageError(fmt::format("--prefetch {}: must be >= 0", p.prefetch));
  if (p.keep_params && p.zero != 3) throw UsageError("--zero3-keep-params: needs --zero 3");
  if (p.zero > 0 && p.progress == Progress::kThread)
    throw UsageError(fmt::format("--progress thread: runs plain data parallel only (--zero {} tests its "
                                 "reductions between backward ops)", p.zero));
  if (p.zero > 0 && p.bucket_mb > 0) {
    const int64_t unit = largest_unit_elements(p.model);
    if (p.bucket_mb * 1024 * 1024 / 4 < static_cast<double>(unit))
      throw UsageError(fmt::format("--bucket-mb {} with --zero {}: ZeRO reduces and gathers whole units (the "
                                   "embeddings, a block, the head); the largest holds {} elements ({:.2f} MiB), "
                                   "so the bucket must be 0 or at least that",
                                   p.bucket_mb, p.zero, unit, static_cast<double>(unit) * 4.0 / 1024 / 1024));
  }
  // Dimensions whose strategies are not in this build, before the degrees are resolved.
  struct Later {
    int degree;
    const char* key;
    const char* what;
  };
  const comm::MeshSpec& m = p.mesh;
  for (const Later& l : {Later{m.etp, "etp", "expert tensor parallel"}})
    if (l.degree > 1)
      throw UsageError(fmt::format("--mesh {}={}: {} is not available in this build (data, tensor, context and "
                                   "pipeline parallel: --mesh dp=N,tp=T,cp=C,pp=P)",
                                   l.key, l.degree, l.what));
  // The degrees must multiply to the world size (RankGrid names the rule it breaks).
  try {
    p.degrees = comm::RankGrid(world, p.mesh, p.order).degrees();
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("--mesh {} --order {}: {}", p.mesh_text.empty() ? "(default)" : p.mesh_text, p.order, e.what()));
  }
  validate_tensor_parallel(p);
  validate_context_parallel(p);
  validate_pipeline(p);
  validate_expert_parallel(p);
}

void validate_expert_parallel(const Plan& p) {
  const int ep = p.degrees.ep;
  if (ep < 2) return;
  const GptConfig& m = p.model;
  if (m.experts == 0)
    throw UsageError(fmt::format("--mesh ep={}: expert parallel places experts on ranks; needs MoE blocks (--experts E)", ep));
  if (m.experts % ep != 0)
    throw UsageError(fmt::format("--mesh ep={}: --experts {} must be divisible by ep (each rank holds E/ep experts)", ep, m.experts));
  if (m.top_k > m.experts)
    throw UsageError(fmt::format("--top-k {}: must be <= --experts {}", m.top_k, m.experts));
  if (p.zero > 0)
    throw UsageError(fmt::format("--mesh ep={} with --zero {}: expert parallel with ZeRO is not available in this build "
                                 "(the expert gradients reduce over edp, not over ZeRO's dp shards)", ep, p.zero));
}

void validate_context_parallel(const Plan& p) {
  const int c = p.degrees.cp, t = p.degrees.tp;
  if (c < 2) return;
  const GptConfig& m = p.model;
  const int parts = p.cp_zigzag ? 2 * c : c;
  if (m.seq % parts != 0)
    throw UsageError(fmt::format("--mesh cp={}: --seq {} must be divisible by {} ({})", c, m.seq, parts,
                                 p.cp_zigzag ? "the zig-zag split cuts the sequence into 2 x cp chunks"
                                             : "the contiguous split cuts it into cp chunks"));
  if (p.cp_algo == CpAlgo::kUlysses) {
    if ((m.heads / t) % c != 0)
      throw UsageError(fmt::format("--cp-algo ulysses with --mesh cp={}: --heads {} per tensor-parallel rank ({}) must "
                                   "be divisible by cp (the all-to-all hands each rank whole heads)", c, m.heads, m.heads / t));
    if ((m.kv_heads / t) % c != 0)
      throw UsageError(fmt::format("--cp-algo ulysses with --mesh cp={}: --kv-heads {} per tensor-parallel rank ({}) "
                                   "must be divisible by cp", c, m.kv_heads, m.kv_heads / t));
  }
  if (p.sp && (m.seq / c) % t != 0)
    throw UsageError(fmt::format("--sp with --mesh cp={},tp={}: --seq {} / cp must be divisible by tp", c, t, m.seq));
  if (m.moe_blocks() > 0)
    throw UsageError(fmt::format("--mesh cp={} with --experts: context parallel with MoE blocks is not available in "
                                 "this build", c));
}

void validate_tensor_parallel(const Plan& p) {
  const int t = p.degrees.tp;
  const GptConfig& c = p.model;
  if (p.sp && t < 2) throw UsageError("--sp: sequence parallel splits the tensor-parallel group; needs --mesh tp=T with T >= 2");
  if (!p.sp_regather && !p.sp) throw UsageError("--sp-regather false: applies to sequence parallel only (add --sp)");
  if (t < 2) return;
  auto rule = [&](int v, const char* opt, const char* why) {
    if (v % t != 0)
      throw UsageError(fmt::format("--mesh tp={}: {} {} must be divisible by tp ({})", t, opt, v, why));
  };
  rule(c.heads, "--heads", "each rank holds whole query heads");
  rule(c.kv_heads, "--kv-heads", "each rank holds whole key/value heads and GQA groups");
  rule(c.ffn, "--ffn", "the MLP width is split over the group");
  if (p.sp && p.degrees.cp < 2) rule(c.seq, "--seq", "with --sp the sequence is split over the group");
  if (c.experts > 0 && p.sp)
    throw UsageError(fmt::format("--experts {} with --sp: MoE blocks with sequence parallel are not available in this "
                                 "build (tensor parallel's all-reduce mode is)", c.experts));
  if (c.experts > 0 && p.degrees.etp != 1)
    throw UsageError(fmt::format("--experts {} with --mesh tp={}: the experts are not split over tensor parallel in "
                                 "this build; add etp=1 to the mesh (whole experts, expert grid etp x ep x edp)",
                                 c.experts, t));
  if (p.zero > 0)
    throw UsageError(fmt::format("--zero {} with --mesh tp={}: ZeRO with tensor parallel is not available in this "
                                 "build (data parallel with tensor parallel is)", p.zero, t));
}

namespace {
void validate_pipeline(const Plan& p) {
  const int P = p.degrees.pp, V = p.vpp, L = p.model.layers;
  const std::string broken = pipeline_rule_broken(p.schedule, pipe_shape(p));
  if (!broken.empty()) throw UsageError(broken);
  if (P > 1 && p.zero == 3)
    throw UsageError(fmt::format("--zero 3 with --mesh pp={}: ZeRO-3 all-gathers each unit's parameters before "
                                 "every micro-batch's forward and backward, 2 m gathers per unit per step under a "
                                 "pipeline schedule (DeepSpeed refuses ZeRO-2/3 with pipeline parallelism for that "
                                 "reason); --zero 1 or 2 shard each stage's state over its data-parallel group", P));
  if (P > 1 && p.sp)
    throw UsageError(fmt::format("--sp with --mesh pp={}: sequence-parallel shards are not sent between stages in "
                                 "this build (tensor parallel without --sp composes with pp)", P));
  if (p.layers_per_stage.empty()) {
    if (L < P * V)  // no split can help: every virtual stage needs a layer
      throw UsageError(fmt::format("--layers {} with pp x vpp = {} x {}: every virtual stage needs at least one "
                                   "layer, so --layers must be at least {} (or lower pp or vpp)",
                                   L, P, V, P * V));
    if (L % (P * V) != 0)
      throw UsageError(fmt::format("--layers {} is not divisible by pp x vpp = {} x {}: give --layers-per-stage "
                                   "(layers of each virtual stage, {} entries of at least 1 summing to {})",
                                   L, P, V, P * V, L));
    return;
  }
  const auto& ls = p.layers_per_stage;
  if (static_cast<int>(ls.size()) != P * V)
    throw UsageError(fmt::format("--layers-per-stage: {} entries, but pp x vpp = {} x {} virtual stages need {}",
                                 ls.size(), P, V, P * V));
  int sum = 0;
  for (int n : ls) {
    if (n < 1) throw UsageError(fmt::format("--layers-per-stage: every virtual stage needs at least 1 layer (got {})", n));
    sum += n;
  }
  if (sum != L)
    throw UsageError(fmt::format("--layers-per-stage: the entries sum to {}, not to --layers {}", sum, L));
}
}  // namespace

PipeShape pipe_shape(const Plan& p) {
  return PipeShape{p.degrees.pp, p.micro_batches, p.vpp, p.vpp_group};
}

std::vector<int> layers_per_virtual_stage(const Plan& p) {
  const int n = p.degrees.pp * p.vpp;
  if (!p.layers_per_stage.empty()) return p.layers_per_stage;
  return std::vector<int>(static_cast<size_t>(n), p.model.layers / n);
}

std::vector<std::pair<int, int>> stage_chunks(const Plan& p, int pp_rank) {
  const int P = p.degrees.pp, V = p.vpp;
  const std::vector<int> per = layers_per_virtual_stage(p);
  std::vector<std::pair<int, int>> chunks;
  int lo = 0;
  for (int vs = 0; vs < P * V; ++vs) {
    const int hi = lo + per[static_cast<size_t>(vs)];
    if (vs % P == pp_rank) chunks.emplace_back(lo, hi);
    lo = hi;
  }
  return chunks;
}

int64_t largest_unit_elements(const GptConfig& c) {
  const int64_t C = c.hidden, F = c.ffn, V = c.vocab, QKV = c.qkv_width();
  const int64_t embed = V * C + int64_t{c.max_seq} * C;
  const int64_t mlp = F * C + F + C * F + C;  // a MoE block: E of them and the router instead
  const int64_t block = 4 * C + QKV * C + QKV + C * C + C + (c.experts > 0 ? c.experts * (C + mlp) : mlp);
  const int64_t head = 2 * C + V + (c.tied ? 0 : V * C);
  return std::max({embed, block, head});
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
