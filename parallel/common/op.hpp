// The compute ops of a step as the trace and the profile name them: the kind of op, and for
// one call what part of which layer it is, its GEMM shape and its FLOPs. Layers hand an OpInfo
// to the runner the model gives them (ComputeOp), which times the call and records it.
// Not here: the timing itself (Gpt::timed, model.cpp) or the events' output (step/step_h5).
#pragma once

#include <functional>

namespace meshbench::parallel {

// Time spent per kind of op when profiling is on (seconds, summed over calls).
enum class Op { kEmbedding, kLayerNorm, kMatmul, kAttention, kGelu, kResidual, kLoss, kAdamW,
                kRouter, kPermute, kCopy, kCount };  // kRouter, kPermute: the MoE blocks (moe.hpp)
const char* op_name(Op op);

// One call: its kind, the part of its layer ("fwd", "dinput", "dweight", "bwd" for both
// gradients at once, "bias_residual", "chunk.fwd"; a string literal, "" for none), the GEMM
// (m x k) times (k x n) it computes (m = n = k = 0 when it is not a GEMM) and its FLOPs
// (2 m n k per GEMM, the attention products; 0 for the elementwise ops).
struct OpInfo {
  Op op = Op::kMatmul;
  const char* part = "";
  int m = 0, n = 0, k = 0;
  double flops = 0;
};

// Runs one compute op of a layer: the model's runner times it and records it under the layer's
// role (qkv, attn.proj, fc, fc.proj, head, attention, moe), so the communication between the
// ops stays outside every compute span. Empty: run directly.
using ComputeOp = std::function<void(const OpInfo& info, const std::function<void()>& op)>;

// One op call in the trace (--profile, --trace): what ran, where, its FLOPs (GEMMs and
// attention products; 0 for the elementwise ops) and its steady-clock start and end
// (seconds); for a layer's op also its role and part ("qkv", "dweight") and GEMM shape (op.hpp).
struct OpEvent {
  int step, micro, layer;  // layer -1: embedding, final norm, head, loss, optimizer
  Op op;
  char phase;       // 'F' forward, 'B' backward, 'O' optimizer
  double flops, t_start, t_end;
  int chunk = 0;    // pipeline model chunk (set by the executor)
  const char* role = "";  // qkv, attn.proj, fc, fc.proj, head, attention, moe ("": the op's name says it)
  const char* part = "";  // OpInfo::part
  int m = 0, n = 0, k = 0;  // the GEMM's shape (op.hpp), 0 otherwise
  // On a device: the DeviceClock marks around the op on the stream that runs it (-1: none);
  // Trace::resolve_marks turns them into t_start and t_end after the step.
  int mark_start = -1, mark_end = -1;
};


}  // namespace meshbench::parallel
