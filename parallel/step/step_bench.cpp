// step_bench: transformer training steps (GPT forward, backward, AdamW) on one rank or many.
// Options -> Plan (plan.hpp) -> groups (comm/) -> sharded model (engine/) -> schedule and
// executor (schedule/) -> trace -> metrics -> reports (HDF5, console, JSON lines, Perfetto).
// Strategies: data parallel (every rank runs its share of the global batch and all-reduces
// the gradients in buckets that overlap the backward, strategies/data_parallel.hpp), ZeRO-1/2/3
// (zero.hpp) and tensor parallel with sequence parallel (tensor_parallel.hpp; the linears in
// engine/tp_layers.hpp), composed through the mesh order. --check compares the step with a reference: a
// float64 run at one rank, the single-rank float32 reference on rank 0 at several.
// Not here: the layers (engine/), the metrics' definitions (metrics.hpp), HDF5 (step_h5).
#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <vector>

#include "comm/mesh.hpp"
#include "comm/topology.hpp"
#include "compute/blas.hpp"
#include "vocab/config.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stats.hpp"
#include "core/timer.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "model/export.hpp"
#include "kernels/flops.hpp"
#include "model/model.hpp"
#include "step/options.hpp"
#include "results/run_context.hpp"
#include "results/run_file.hpp"
#include "step/check.hpp"
#include "comm/agree.hpp"
#include "comm/clock_sync.hpp"
#include "compute/device.hpp"
#include "comm/finalize.hpp"
#include "comm/mesh_comm.hpp"
#include "comm/watched_comm.hpp"
#include "core/op_watch.hpp"
#include "results/hang.hpp"
#include "results/output_path.hpp"
#include "data_parallel/data_parallel.hpp"
#include "zero/zero.hpp"
#include "kernels/comm_group.hpp"
#include "tensor_parallel/tensor_parallel.hpp"
#include "context_parallel/context_parallel.hpp"
#include "expert_parallel/ep_report.hpp"
#include "executor/executor.hpp"
#include "metrics/metrics.hpp"
#include "report/perfetto.hpp"
#include "vocab/plan.hpp"
#include "step/plan_memory.hpp"
#include "step/plan_only.hpp"
#include "metrics/report.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "step/peak.hpp"
#include "step/setup.hpp"
#include "report/step_h5.hpp"
#include "vocab/trace.hpp"
#include "pipeline_parallel/pipeline_parallel.hpp"
#include "step/rules.hpp"
#include "model/step_parity.hpp"

namespace mb = meshbench;
using mb::core::UsageError;
using mb::core::ExitCode;
constexpr int kExitOk = mb::core::code(ExitCode::kOk), kExitCheck = mb::core::code(ExitCode::kCheckFailed),
              kExitUsage = mb::core::code(ExitCode::kUsage), kExitRuntime = mb::core::code(ExitCode::kRuntime);
using namespace mb::parallel;

namespace {

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) {
  g_signal.store(sig);
  std::signal(sig, SIG_DFL);  // a second signal ends the process at once
}

// A write to rank 0's results file; a throw (an HDF5 call that failed) is held like a failed
// publish, and the next stop decision ends the run.
template <typename F>
void write_or_hold(StepH5& h5, F&& f) {
  if (!h5.error().empty()) return;
  try {
    f();
  } catch (const std::exception& e) {
    h5.hold_error(e.what());
  }
}

bool model_on_device(const Gpt<float>& m) { return m.backend().mem() == mb::compute::MemKind::kDevice; }

double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

std::string human_bytes(double b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB"};
  int i = 0;
  while (b >= 1024 && i < 3) {
    b /= 1024;
    ++i;
  }
  return fmt::format("{:.2f} {}", b, u[i]);
}


// Megatron's activation memory per layer per micro-batch (FORMULAS.md; 16-bit activations
// with dropout masks, bytes): sbh(34 + 5as/h) without TP, sbh(10 + 24/t + 5as/(ht)) with TP,
// sbh(34 + 5as/h)/t with TP + SP. Printed beside this engine's measured fp32 activations.
double megatron_activation_bytes_per_layer(const Plan& plan) {
  const GptConfig& c = plan.model;
  const double s = c.seq, b = c.micro_batch, h = c.hidden, a = c.heads, t = plan.degrees.tp;
  if (t <= 1) return s * b * h * (34 + 5 * a * s / h);
  if (plan.sp) return s * b * h * (34 + 5 * a * s / h) / t;
  return s * b * h * (10 + 24 / t + 5 * a * s / (h * t));
}

std::string strategy_name(const Plan& plan) {
  const auto& d = plan.degrees;
  std::string s = plan.zero > 0 ? fmt::format("zero{}", plan.zero) : (d.dp > 1 ? "data_parallel" : "");
  if (d.tp > 1) s += std::string(s.empty() ? "" : "+") + (plan.sp ? "tensor_parallel_sp" : "tensor_parallel");
  if (d.cp > 1) s += std::string(s.empty() ? "" : "+") + "context_parallel_" + cp_algo_name(plan.cp_algo);
  if (d.ep > 1) s += std::string(s.empty() ? "" : "+") + "expert_parallel";
  return s.empty() ? "single" : s;
}

// The closed form of the params, grads and optimizer rows, in words: per element of the flat
// array this rank holds (its tensor-parallel slices, pipeline stage and experts, padding
// included), ZeRO sharding the state over the d = dp x cp ranks of its data-parallel group.
std::string memory_formula(const Plan& plan) {
  const auto& d = plan.degrees;
  std::vector<std::string> held;
  if (d.tp > 1) held.push_back(fmt::format("its 1/{} tensor-parallel slices", d.tp));
  if (d.pp > 1) held.push_back("its pipeline stage's layers");
  if (d.ep > 1) held.push_back(fmt::format("its {} of {} experts", plan.model.experts / d.ep, plan.model.experts));
  const std::string of = held.empty() ? "the whole model" : fmt::format("{}", fmt::join(held, ", "));
  std::string state;
  switch (plan.zero) {
    case 1: state = "ZeRO-1: params 4, grads 4, optimizer 8/d bytes"; break;
    case 2: state = "ZeRO-2: params 4, grads 4/d (+ the units' full gradients while they are reduced), optimizer 8/d bytes"; break;
    case 3:
      state = "ZeRO-3: params 4/d (+ gathered units), grads 4/d (+ units' full gradients while reduced; + 4/d scratch "
              "with m > 1), optimizer 8/d bytes";
      break;
    default: state = "params 4, grads 4, optimizer 8 bytes (16)"; break;
  }
  return fmt::format("fp32 with AdamW, per element of the flat array this rank holds ({}; padding included): {}{}", of,
                     state, plan.zero > 0 ? fmt::format(", d = dp x cp = {}", d.dp * d.cp) : std::string());
}

nlohmann::ordered_json step_attributes(const Options& o, const Plan& plan, const Gpt<float>& model, int threads,
                                       const StepFlops& fl, const Peak& peak, double datasheet,
                                       const std::string& gpu_name, const Setup& st) {
  const GptConfig& c = plan.model;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const bool gpu = o.device == "cuda";
  const auto& d = plan.degrees;
  return nlohmann::ordered_json{
      {"preset", o.preset}, {"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
      {"kv_heads", c.kv_heads}, {"ffn", c.ffn}, {"seq", c.seq}, {"max_seq", c.max_seq},
      {"vocab", c.vocab}, {"micro_batch", c.micro_batch}, {"tied", c.tied},
      {"experts", c.experts}, {"top_k", c.top_k}, {"moe_every", c.moe_every},
      {"capacity_factor", c.capacity_factor}, {"moe_capacity", moe_capacity(c)}, {"aux_loss_coef", c.aux_loss_coef},
      {"parameters", model.num_params()}, {"grad_elements", model.layout().total()}, {"device", o.device}, {"dtype", o.dtype},
      {"threads", threads}, {"openblas_coretype", coretype ? coretype : ""},
      {"data", o.data}, {"seed", o.seed}, {"lr", o.adam.lr}, {"beta1", o.adam.beta1},
      {"beta2", o.adam.beta2}, {"eps", o.adam.eps}, {"weight_decay", o.adam.weight_decay},
      {"strategy", strategy_name(plan)}, {"cp_algo", cp_algo_name(plan.cp_algo)},
      {"cp_split", plan.cp_zigzag ? "zigzag" : "contiguous"},
      {"megatron_activation_bytes", megatron_activation_bytes_per_layer(plan) * c.layers},
      {"megatron_activation_formula", plan.degrees.tp <= 1 ? "L sbh(34 + 5as/h)"
                                      : (plan.sp ? "L sbh(34 + 5as/h)/t" : "L sbh(10 + 24/t + 5as/(ht))")}, {"sequence_parallel", plan.sp}, {"sp_regather", plan.sp_regather},
      {"vocab_padded", int64_t{model.tp_dims().vocab} * d.tp},
      {"vocab_padding_rule", "tensor parallel pads the vocabulary to a multiple of tp; padded rows are zero, masked out of the loss and dropped by --check"},
      {"degrees", nlohmann::ordered_json{{"dp", d.dp}, {"tp", d.tp}, {"pp", d.pp}, {"cp", d.cp}, {"ep", d.ep}}},
      {"order", plan.order}, {"schedule", d.pp > 1 ? name(plan.schedule) : "accumulate"},
      {"vpp", plan.vpp}, {"vpp_group", plan.vpp_group > 0 ? plan.vpp_group : d.pp},
      {"layers_per_stage", layers_per_virtual_stage(plan)},
      {"schedule_actions", to_string(st.actions)}, {"microbatches", plan.micro_batches},
      {"global_batch", plan.global_batch()}, {"grad_reduce", o.grad_reduce}, {"overlap", plan.overlap},
      {"progress", o.progress}, {"buckets", st.dp ? st.dp->buckets() : (st.zero ? int(model.units().size()) : 0)},
      {"bucket_elements", st.dp ? st.dp->bucket_elements() : 0},
      {"zero_stage", plan.zero}, {"prefetch", plan.prefetch}, {"zero3_keep_params", plan.keep_params},
      {"zero_shard_elements", st.zero ? st.zero->shard_elements() : 0},
      {"zero_padding_elements", st.zero ? st.zero->padding_elements() : 0},
      {"zero_units", "embeddings, each block, the head; each padded to a multiple of 16 x dp elements and split evenly"},
      {"memory_formula", memory_formula(plan)},
      {"bucket_rule", "--bucket-mb, else a quarter of the gradient elements clamped to [16 Ki, 40 M], rounded up to 64"},
      {"grad_bytes_padding", "the flat gradient array, each tensor aligned to 16 elements"},
      {"flops_per_step", fl.total() * plan.micro_batches * d.dp}, {"flops_per_microbatch", fl.total()},
      {"flops_forward_gemm", fl.forward_gemm},
      {"flops_backward_gemm", fl.backward_gemm}, {"flops_attention_forward", fl.attention_forward},
      {"flops_attention_backward", fl.attention_backward},
      {"flops_formula", "2*M*N*K per GEMM; fwd linears x3 (fwd, dinput, dweight); attention "
                        "QK^T,PV fwd + 4 bwd products in causal 64-row blocks; per micro-batch x m x dp"},
      {"peak_measured_flops", peak.best}, {"peak_measured_median_flops", peak.median},
      {"peak_rule", "best sgemm rate on the largest GEMM shape, measured before and after the timed steps; the higher is used"},
      {"peak_gemm", fmt::format("{} {}x{}x{} sgemm", peak.shape.name, peak.shape.M, peak.shape.N, peak.shape.K)},
      {"peak_datasheet_flops", datasheet},
      {"peak_datasheet_source", gpu ? "NVIDIA datasheet dense peak by device name: " + gpu_name : "none (cpu)"},
      {"gpu", gpu_name}};
}

// The memory of this rank per category: the peak bytes allocated during the timed steps,
// beside the analytic value. Parameters, gradients, optimizer state and buffers come from
// plan_memory (the closed forms --plan-only prints and the sweep prunes by, so a run checks
// them); pipeline activations from the slots this stage's schedule holds at its peak, sized
// by the model that was built, plus the MoE routing state kept per micro-batch.
std::vector<MemoryRow> memory_rows(const Gpt<float>& model, const Plan& plan, const std::vector<Action>& actions,
                                   int pp_rank) {
  const MemoryTracker& t = model.memory();
  auto peak = [&](MemCat k) { return double(t.peak[static_cast<int>(k)]); };
  const PlanMemory pm = plan_memory(plan, pp_rank);
  const double ap = pm.params, ag = pm.grads, ao = pm.optimizer, ab = pm.buffers;
  double aa = pm.activations;
  if (plan.degrees.pp > 1) {
    std::vector<int64_t> slot;
    for (int k = 0; k < model.num_chunks(); ++k) slot.push_back(model.slot_elements(k) * 4);
    aa = double(scheduled_activation_peak(actions, slot) + model.moe().state_bytes());
  }
  return {{"params", peak(MemCat::kParams), ap},
          {"grads", peak(MemCat::kGrads), ag},
          {"optimizer", peak(MemCat::kOptimizer), ao},
          {"activations", peak(MemCat::kActivations), aa},
          {"buffers", peak(MemCat::kBuffers), ab},
          {"engine_peak", double(t.total_peak), NAN},
          {"process_peak_rss", peak_rss_bytes(), NAN}};
}

void print_memory(const mb::core::Log& out, const std::vector<MemoryRow>& mem, const Plan& plan) {
  out.out("  memory, peak per category (rank 0)  measured     analytic\n");
  for (const auto& r : mem)
    out.out("    {:<16} {:>12} {:>12}\n", r.category, human_bytes(r.measured_bytes),
            std::isnan(r.analytic_bytes) ? std::string("-") : human_bytes(r.analytic_bytes));
  const double meg = megatron_activation_bytes_per_layer(plan) * plan.model.layers;
  for (const auto& r : mem)
    if (r.category == "activations")
      out.out("    activations beside Megatron's {} x L = {} (16-bit with dropout masks; this engine keeps fp32, no "
              "dropout): measured/Megatron {:.2f}\n",
              plan.degrees.tp <= 1 ? "sbh(34 + 5as/h)"
                                   : (plan.sp ? "sbh(34 + 5as/h)/t" : "sbh(10 + 24/t + 5as/(ht))"),
              human_bytes(meg), r.measured_bytes / meg);
}

// --check before timing; returns "pass", "fail" or "off" and the rows.
std::string run_check(const Options& o, Setup& st, StepEnv<float>& env, int world, const mb::core::Log& out,
                      std::vector<CheckRow>& rows) {
  if (!o.check) return "off";
  const GptConfig& c = o.model;
  // A strategy (ZeRO, even over one rank) holds the state the fp64 check would read from the
  // model: it is checked against the single-rank reference like any parallel plan.
  const bool plain = world == 1 && !st.sync;
  if (plain && model_on_device(*st.model)) {
    // On a GPU the reference is the CPU float32 path: one whole step, normalised errors.
    const Precision prec = o.dtype == "bf16" ? Precision::kBf16 : Precision::kFp32;
    for (const auto& r : step_parity(c, st.model->backend(), prec, static_cast<unsigned>(o.seed)))
      rows.push_back({"cuda_vs_cpu:" + r.op, NAN, r.rel_err, r.tolerance, r.rel_err <= r.tolerance});
  } else if (plain) {
    std::vector<int32_t> tok(static_cast<size_t>(c.tokens())), tgt(tok.size());
    synthetic_batch(tok.data(), tgt.data(), env.data, o.seed, 0, 0, c.micro_batch, c.seq, c.vocab);
    rows = check_against_fp64(*st.model, tok.data(), tgt.data());
  } else {
    rows = check_against_reference(env, st.actions, MPI_COMM_WORLD);
    st.model->init_weights(o.seed);  // the timed steps start from the canonical weights again
  }
  for (const auto& r : rows)
    if (!r.pass || r.quantity.rfind("grad:", 0) != 0)
      out.out("  check {:<32} rel {:.3e} max_abs {:.3e} tol {:.0e} {}\n", r.quantity, r.rel, r.max_abs,
              r.tolerance, r.pass ? "ok" : "FAIL");
  return all_pass(rows) ? "pass" : "fail";
}

// MoE (issue 13): the timed steps' assignments and capacity drops, summed over the ranks
// (the busiest expert: the maximum), to the console and the HDF5 step attributes.
// Tensor-parallel ranks route the same tokens: the sums are divided by tp.
void report_moe(const GptConfig& c, const MoeTotals& mine, int tp, StepH5* h5, const mb::core::Log& out) {
  if (c.experts == 0) return;
  MoeTotals t;
  int64_t sums[2] = {mine.routed, mine.dropped}, all[2] = {0, 0};
  MPI_Allreduce(sums, all, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&mine.worst_expert, &t.worst_expert, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  t.routed = all[0] / tp;
  t.dropped = all[1] / tp;
  const double frac = t.routed > 0 ? double(t.dropped) / double(t.routed) : 0.0;
  out.out("  moe: {} MoE blocks x {} experts, top-{}, capacity {}: {} assignments over the timed steps, "
          "{} dropped ({:.2f}%), busiest expert {} rows in one block\n",
          c.moe_blocks(), c.experts, c.top_k,
          moe_capacity(c) > 0 ? fmt::format("{} rows/expert", moe_capacity(c)) : std::string("dropless"),
          t.routed, t.dropped, 100 * frac, t.worst_expert);
  if (h5)
    h5->write_step_attrs({{"moe_assignments", double(t.routed)}, {"moe_dropped", double(t.dropped)},
                          {"moe_drop_fraction", frac}, {"moe_worst_expert_rows", double(t.worst_expert)}});
}

// Why the timed loop stopped early, agreed by every rank (bits OR-ed over the world).
enum StopBits : int { kStopTime = 1, kStopSignal = 2, kStopWrite = 4, kStopDiverged = 8 };

struct LoopEnd {
  int why = 0;          // StopBits, 0: every step ran
  int at_step = -1;     // the step (counting warm-up) that stopped it
  std::string detail;   // diverged: what was not finite
};

// One agreement per step, before it: the time limit (rank 0's clock), a SIGTERM/SIGINT on any
// rank, a write that failed on rank 0, or a divergence any rank saw in the step before. It is
// also every step's common start (it replaces a barrier).
int stop_decision(int mine, mb::core::OpWatch* watch) {
  int all = 0;
  mb::comm::WatchScope w(watch, "MPI_Allreduce (stop decision, step start)", sizeof all, "world");
  MB_CHECK_MPI(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD), "world");
  return all;
}

// The timed loop: warm-up, then steps; every rank starts each step after the stop decision.
LoopEnd timed_steps(const Options& o, StepEnv<float>& env, Setup& st, StepH5* h5, std::vector<double>& losses,
                    const mb::core::Log& out) {
  const double t_origin = mb::core::now_seconds();
  const int total = o.warmup + o.steps;
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Backend<float>& be = st.model->backend();
  be.take_nonfinite_grads();  // the check's steps are not this loop's
  LoopEnd end;
  int diverged = 0;
  std::string diverged_detail;
  std::vector<double> times(static_cast<size_t>(world)), phases(static_cast<size_t>(world) * kPhaseNames.size());
  using mb::comm::WatchScope;
  for (int s = 0; s <= total; ++s) {
    int mine = diverged ? kStopDiverged : 0;
    if (g_signal.load() != 0) mine |= kStopSignal;
    if (rank == 0 && o.time_limit > 0 && mb::core::now_seconds() - t_origin > o.time_limit) mine |= kStopTime;
    if (rank == 0 && h5 && !h5->error().empty()) mine |= kStopWrite;
    const int why = stop_decision(mine, st.watch);
    if (why != 0) {
      end = {why, s - 1, diverged_detail};
      if (why & kStopDiverged) {  // every rank learns what the diverging ranks saw
        std::string first = diverged_detail;
        try {
          mb::comm::agree_on_fault(MPI_COMM_WORLD, first);
        } catch (const mb::core::OutputFault& e) {
          end.detail = e.what();
        }
      }
      return end;
    }
    if (s == total) break;
    if (st.watch) st.watch->set_context(fmt::format("step {} of {} ({} warm-up)", s, total, o.warmup));
    const bool timed = s >= o.warmup;
    if (s == o.warmup) {  // the op profile and the memory peaks cover the timed steps only
      st.model->reset_profile();
      st.model->memory().reset_peaks();
      st.model->moe().reset_totals();
    }
    st.trace.on = timed;
    const int step = timed ? s - o.warmup : -1;
    const double loss_local = run_step(env, st.actions, step, s, s + 1);
    st.trace.on = false;
    // Divergence: this rank's loss (its share, or a pipeline stage's part) or the gradient
    // elements its optimizer consumed (Backend::take_nonfinite_grads) are not finite.
    const int64_t bad_grads = be.take_nonfinite_grads();
    if (!std::isfinite(loss_local) || bad_grads > 0) {
      diverged = 1;
      diverged_detail = fmt::format("step {}{}: rank {} loss {}, {} non-finite gradient elements", s,
                                    timed ? fmt::format(" (timed step {})", step) : std::string(" (warm-up)"),
                                    rank, loss_local, bad_grads);
    }
    if (!timed) continue;
    double loss = 0;  // the global batch's mean loss (reporting, outside the step)
    {
      WatchScope w(st.watch, "MPI_Allreduce (loss)", sizeof loss, "world");
      MPI_Allreduce(&loss_local, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    loss /= world;
    losses.push_back(loss);
    if (o.output.empty()) continue;
    // Every rank's step time and phases to rank 0, the writer.
    const std::array<double, 4> ph = step_phases(st.trace, step);
    const double t = st.trace.step_end.back() - st.trace.step_start.back();
    {
      WatchScope w(st.watch, "MPI_Gather (step times for the results file)", sizeof t, "world");
      MB_CHECK_MPI(MPI_Gather(&t, 1, MPI_DOUBLE, times.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD), "world");
      MB_CHECK_MPI(MPI_Gather(ph.data(), 4, MPI_DOUBLE, phases.data(), 4, MPI_DOUBLE, 0, MPI_COMM_WORLD), "world");
    }
    if (h5) write_or_hold(*h5, [&] { h5->append_step(times, phases, loss); });
  }
  return end;
}

// The compute backend of this rank: the CPU, or one GPU (local rank modulo the node's GPUs).
struct Compute {
  std::unique_ptr<Backend<float>> gpu_backend;  // declared before anything that uses it
  Backend<float>* backend = nullptr;
  bool gpu = false;
  int device = -1;
  std::string gpu_name = "none";
  Precision prec = Precision::kFp32;
};

void make_compute(Compute& cp, const Options& o, const mb::comm::Topology& topo, int rank) {
  cp.gpu = o.device == "cuda";
  cp.prec = o.dtype == "bf16" ? Precision::kBf16 : Precision::kFp32;
  cp.backend = &cpu_backend<float>();
  if (!cp.gpu) return;
  std::string why;
  if (!cuda::available(&why)) throw UsageError(fmt::format("--device cuda: no usable GPU ({})", why));
  cp.device = topo.ranks[static_cast<size_t>(rank)].local_rank % mb::compute::device_count();
  cp.gpu_backend = cuda::make_backend(cp.prec, cp.device);
  cp.gpu_name = cuda::device_name(cp.device);
  cp.backend = cp.gpu_backend.get();
}

// The threads of each rank (OpenMP and OpenBLAS): --threads; else OMP_NUM_THREADS; else the
// cores the rank may run on shared among the ranks on its host (a rank bound to its own cores,
// as srun --cpu-bind does, keeps them all), at least 1. Oversubscribed: more threads than
// cores on some host, flagged in the header, the run's attributes and the report.
struct Threads {
  int n = 1;
  std::string rule;
  bool oversubscribed = false;  // on any host
};

Threads set_threads(const Options& o, const mb::comm::Topology& topo, int rank) {
  Threads t;
  const std::string& host = topo.ranks[static_cast<size_t>(rank)].host;
  int ranks_here = 0;
  for (const auto& p : topo.ranks) ranks_here += p.host == host ? 1 : 0;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const int online = std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  const int mine = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : online;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (o.threads > 0) {
    t.n = o.threads;
    t.rule = "--threads";
  } else if (omp && std::atoi(omp) > 0) {
    t.n = std::atoi(omp);
    t.rule = "OMP_NUM_THREADS";
  } else if (mine < online) {
    t.n = mine;
    t.rule = fmt::format("the rank's CPU binding, {} cores", mine);
  } else {
    t.n = std::max(1, mine / ranks_here);
    t.rule = fmt::format("{} cores / {} ranks on host {}", mine, ranks_here, host);
  }
  omp_set_num_threads(t.n);
  mb::compute::set_blas_threads(t.n);
  int over = t.n * ranks_here > online ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &over, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  t.oversubscribed = over != 0;
  return t;
}

void print_header(const mb::core::Log& out, const Options& o, const Plan& plan, const Setup& st,
                  const Compute& cp, const mb::comm::Topology& topo) {
  const GptConfig& c = o.model;
  const StepFlops fl = step_flops(c);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  out.out("step_bench: {} on {} ({}; {} threads per rank, OPENBLAS_CORETYPE={})\n", describe(c),
          cp.gpu ? fmt::format("{} {}", cp.gpu_name, o.dtype) : std::string("cpu"), cp.backend->name(),
          omp_get_max_threads(), coretype ? coretype : "unset");
  out.out("  parameters {} ({}), FLOPs per micro-batch {:.4g} (fwd GEMM {:.4g}, bwd GEMM {:.4g}, attention fwd {:.4g} bwd {:.4g})\n",
          st.model->num_params(), human_bytes(static_cast<double>(st.model->num_params()) * 4), fl.total(),
          fl.forward_gemm, fl.backward_gemm, fl.attention_forward, fl.attention_backward);
  if (plan.world > 1 || plan.micro_batches > 1 || plan.zero > 0)
    out.out("  plan: {}; {} ranks{}; schedule {}\n", describe(plan), plan.world,
            topo.oversubscribed ? " (OVERSUBSCRIBED: more ranks than cores, times are not meaningful)" : "",
            to_string(st.actions));
  if (st.sync) out.out("  {}\n", st.sync->describe());
}

void print_peak(const mb::core::Log& out, const Compute& cp, const Peak& peak, double datasheet) {
  out.out("  {} peak on {} ({}x{}x{}): best {:.2f} GFLOP/s, median {:.2f} over {} calls (rank 0){}\n",
          cp.gpu ? "cuBLAS GEMM" : "SGEMM", peak.shape.name, peak.shape.M, peak.shape.N, peak.shape.K,
          peak.best / 1e9, peak.median / 1e9, peak.reps,
          cp.gpu ? (std::isnan(datasheet) ? std::string("; no datasheet entry for this GPU")
                                          : fmt::format("; datasheet dense peak {:.1f} TFLOP/s", datasheet / 1e12))
                 : std::string());
}

// The run's provenance; created before timing with the file, so a killed run leaves the
// finished steps readable.
mb::results::RunContext make_context(const Options& o, const Plan& plan, const Compute& cp, int argc, char** argv,
                                     const mb::comm::Topology& topo) {
  mb::results::RunContext ctx = mb::results::make_run_context(MPI_COMM_WORLD, "step_bench", argc, argv, topo);
  ctx.attrs["tag"] = o.tag;
  ctx.attrs["backend"] = o.backend;
  ctx.attrs["order"] = plan.order;
  ctx.attrs["group"] = o.group;
  ctx.attrs["time_limit"] = o.time_limit;
  ctx.attrs["mem"] = cp.gpu ? "device" : "host";
  ctx.attrs["iters"] = o.steps;
  ctx.attrs["warmup"] = o.warmup;
  ctx.attrs["check"] = o.check;
  const auto& d = plan.degrees;
  ctx.attrs["mesh"] = nlohmann::ordered_json{{"dp", d.dp}, {"tp", d.tp}, {"pp", d.pp}, {"cp", d.cp}, {"ep", d.ep}};
  mb::results::sync_from_root(ctx, MPI_COMM_WORLD);
  return ctx;
}

// Every rank's metrics (from its trace) and peak, gathered into rank 0's record.
StepRecord gather_record(const Options& o, const Plan& plan, const Setup& st, const RankMetrics& rm,
                         const std::vector<double>& losses, double peak_used) {
  const int world = plan.world;
  StepRecord rec;
  rec.model = describe(o.model);
  rec.plan = describe(plan);
  rec.ranks = world;
  rec.steps = static_cast<int>(rm.step_time.size());
  rec.warmup = o.warmup;
  rec.global_tokens = static_cast<double>(plan.global_tokens());
  rec.flops_per_step = step_flops(o.model).total() * plan.micro_batches * plan.degrees.dp;
  rec.loss = losses;
  std::vector<AnalyticBytes> analytic;  // this rank's, from the plan; summed over ranks below
  if (st.sync) analytic = st.sync->analytic();
  int layers = 0, moe_layers = 0;  // this rank's blocks (a pipeline stage holds some), and its MoE ones
  for (int k = 0; k < st.model->num_chunks(); ++k)
    for (int l = st.model->chunk_layers(k).first; l < st.model->chunk_layers(k).second; ++l) {
      ++layers;
      moe_layers += plan.model.is_moe(l) ? 1 : 0;
    }
  for (const AnalyticBytes& a :
       tp_analytic(plan, 4, layers, st.model->first_stage(), st.model->last_stage(), moe_layers))
    analytic.push_back(a);
  for (const AnalyticBytes& a : cp_analytic(plan, 4, layers)) analytic.push_back(a);
  for (const AnalyticBytes& a : ep_analytic(plan.model, plan.degrees.ep, st.model->moe().totals().ep, rec.steps, 4))
    analytic.push_back(a);
  if (st.pipe) {
    const GptConfig& c = plan.model;
    const int t = plan.degrees.tp;
    const uint64_t msg = uint64_t(c.micro_batch) * uint64_t(c.seq / plan.degrees.cp) * uint64_t(c.hidden) * sizeof(float);
    const uint64_t wte = uint64_t((c.vocab + t - 1) / t) * uint64_t(c.hidden) * sizeof(float);  // this rank's rows
    for (const AnalyticBytes& a : pipeline_analytic(*st.pipe, plan.micro_batches, msg, wte)) analytic.push_back(a);
  }
  rec.analytic = sum_over_ranks(analytic, world, MPI_COMM_WORLD);
  const int n = rec.steps;
  std::vector<double> times(static_cast<size_t>(n) * world), ph(static_cast<size_t>(n) * world * 4), mine;
  for (const auto& p : rm.phases) mine.insert(mine.end(), p.begin(), p.end());
  rec.peak.resize(static_cast<size_t>(world));
  MPI_Gather(rm.step_time.data(), n, MPI_DOUBLE, times.data(), n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(mine.data(), 4 * n, MPI_DOUBLE, ph.data(), 4 * n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(&peak_used, 1, MPI_DOUBLE, rec.peak.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  rec.step_time.assign(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(world)));
  rec.phases.assign(static_cast<size_t>(n), std::vector<std::array<double, 4>>(static_cast<size_t>(world)));
  for (size_t r = 0; r < static_cast<size_t>(world); ++r)
    for (size_t s = 0; s < static_cast<size_t>(n); ++s) {
      rec.step_time[s][r] = times[r * n + s];
      for (size_t k = 0; k < 4; ++k) rec.phases[s][r][k] = ph[(r * n + s) * 4 + k];
    }
  rec.comm = gather_rows(rm.comm, MPI_COMM_WORLD);
  return rec;
}

std::vector<std::pair<std::string, double>> print_profile(const mb::core::Log& out, const Gpt<float>& model,
                                                          int steps, double step_time) {
  std::vector<std::pair<std::string, double>> ops;
  out.out("  op profile (rank 0, per step, over timed steps):\n");
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    const double per = model.op_seconds()[i] / std::max(1, steps);
    ops.emplace_back(op_name(static_cast<Op>(i)), per);
    out.out("    {:<14} {:9.3f} ms  {:5.1f}%\n", op_name(static_cast<Op>(i)), per * 1e3, 100 * per / step_time);
  }
  return ops;
}

// This rank's metrics (metrics.hpp), every rank's pipeline posts exchanged first (the time
// split charges a pipeline call's wait for its peer to the bubble).
// Pipeline parallel: also this rank's stored activations and bubble into `pipe`.
RankMetrics rank_metrics_of(const Setup& st, int rank, double offset, PipelineRow& pipe) {
  const std::vector<P2pPost> posts = allgather_rows(p2p_posts(st.trace, offset), MPI_COMM_WORLD);
  RankMetrics rm = rank_metrics(st.trace, rank, offset, posts);
  if (st.pipe)
    pipe = pipeline_row(st.trace, rank, offset, rm.split, posts,
                        bubble_theory(st.plan->degrees.pp, st.plan->micro_batches, st.plan->vpp));
  return rm;
}

// What a run produced, handed to the reporters.
struct Outcome {
  StepRecord rec;
  StepSummary sum;
  std::vector<MemoryRow> mem;
  std::vector<CheckRow> check_rows;
  std::string check;
  LoopEnd end;
};

// The run's status in the file and its exit code, from how the loop ended and the check.
std::pair<std::string, int> verdict(const Outcome& r) {
  if (r.end.why & kStopDiverged) return {"diverged", mb::core::code(ExitCode::kDiverged)};
  if (r.end.why & kStopSignal) return {"killed", kExitRuntime};
  if (r.end.why & kStopTime) return {"timeout", kExitRuntime};
  if (r.check == "fail") return {"failed", kExitCheck};
  return {"ok", kExitOk};
}

// Console on rank 0; the results file (rank 0 writes what every rank sends it); the trace.
// Rank 0's write errors are held in `write_error` for the caller to agree on.
void report(const Options& o, const Setup& st, const Outcome& r, StepH5* h5, const mb::comm::ClockOffset& clock,
            double t_origin, const mb::comm::Topology& topo, const mb::core::Log& out, int rank,
            std::string& write_error) {
  if (r.rec.steps > 0) print_step_report(out, r.rec, r.sum);
  print_memory(out, r.mem, *st.plan);
  std::vector<std::pair<std::string, double>> ops;
  if (o.profile) ops = print_profile(out, *st.model, r.rec.steps, r.sum.step_time_median);
  // Every rank's rows, gathered once for the file and the trace (events: with --profile or --trace).
  std::vector<EventRow> events;
  if (o.profile || !o.trace_file.empty()) events = event_rows(st.trace, rank, t_origin, clock.offset_s);
  const std::vector<EventRow> all_events = gather_rows(events, MPI_COMM_WORLD);
  const std::vector<SlotRow> slots = gather_rows(slot_rows(st.trace, rank, t_origin, clock.offset_s), MPI_COMM_WORLD);
  const std::vector<PassRow> passes = gather_rows(pass_rows(st.trace, rank, t_origin, clock.offset_s), MPI_COMM_WORLD);
  const std::vector<MemoryCell> mem = gather_rows(memory_cells(r.mem, rank), MPI_COMM_WORLD);
  std::vector<mb::comm::ClockOffset> offsets(static_cast<size_t>(r.rec.ranks));
  MPI_Gather(&clock, 2, MPI_DOUBLE, offsets.data(), 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  double clock_err = clock.error_s;
  MPI_Allreduce(MPI_IN_PLACE, &clock_err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank != 0) return;
  auto hold = [&](const char* what, auto&& f) {
    if (!write_error.empty()) return;
    try {
      f();
    } catch (const std::exception& e) {
      write_error = fmt::format("{}: {}", what, e.what());
    }
  };
  if (!o.trace_file.empty())
    hold("--trace", [&] {
      std::vector<std::string> hosts;
      for (const auto& p : topo.ranks) hosts.push_back(p.host);
      write_perfetto(o.trace_file, all_events, offsets, hosts, slots, passes);
      out.always("step_bench: wrote the trace to {} (open in ui.perfetto.dev)\n", o.trace_file);
    });
  const auto [status, rc] = verdict(r);
  (void)rc;
  if (h5) {
    write_or_hold(*h5, [&] {
      h5->write_memory(mem);
      h5->write_comm(r.rec.comm);
      h5->write_time_split(r.rec.split);
      h5->write_check(r.check_rows);
      h5->write_summary(r.sum);
      if (o.profile) h5->write_op_profile(ops);
      h5->write_events(all_events);
      if (st.pipe) h5->write_pipeline(r.rec.pipeline, slots, passes);
      nlohmann::ordered_json attrs = {{"clock_offset_error_max_s", clock_err}};
      if (r.end.why & kStopDiverged) attrs["diverged"] = r.end.detail;
      h5->write_step_attrs(attrs);
      h5->finish(status);
    });
    if (write_error.empty() && !h5->error().empty()) write_error = h5->error();
    if (write_error.empty() && r.rec.steps > 0)
      hold("JSON lines", [&] {
        write_step_jsonl(mb::results::jsonl_path(o.output), h5->run_id(), o.tag, r.rec, r.sum, omp_get_max_threads());
      });
    if (write_error.empty()) out.always("step_bench: wrote run {} to {} (status {})\n", h5->run_id(), o.output, status);
  }
  if (r.rec.steps > 0)
    out.always("step_bench: median {:.3f} ms/step, {:.0f} tokens/s, {:.2f} GFLOP/s, MFU {:.1f}% (measured GEMM peak), check {}\n",
               r.sum.step_time_median * 1e3, r.sum.tokens_per_s, r.sum.model_flops_per_s / 1e9,
               100 * r.sum.mfu_measured_peak, r.check);
}

// --export: one single-rank step for scripts/torch_reference.py.
int run_export(const Options& o, Gpt<float>& model, DataKind data, const mb::core::Log& out) {
  const GptConfig& c = o.model;
  std::vector<int32_t> tok(static_cast<size_t>(c.tokens())), tgt(tok.size());
  synthetic_batch(tok.data(), tgt.data(), data, o.seed, 0, 0, c.micro_batch, c.seq, c.vocab);
  ExportedStep s = run_export_step(model, tok.data(), tgt.data(), o.adam);
  write_export(o.export_dir, model, s, o.adam);
  out.always("step_bench: exported one step of {} (loss {:.6f}) to {}\n", describe(c), s.loss, o.export_dir);
  return kExitOk;
}

// Before set-up, rank 0 claims -O (one writer, never overwritten: results/output_path.hpp) and
// checks that --trace and --export can be written; a problem is exit 2 on every rank.
void claim_outputs(const Options& o, mb::results::OutputClaim& claim, int rank) {
  std::string problem;
  if (rank == 0) {
    if (!o.output.empty()) problem = claim.claim(o.output, o.append, "step_bench");
    if (problem.empty() && !o.trace_file.empty()) problem = mb::results::writable_problem("--trace", o.trace_file, false);
    if (problem.empty() && !o.export_dir.empty()) problem = mb::results::writable_problem("--export", o.export_dir, true);
  }
  mb::comm::agree_or_throw(MPI_COMM_WORLD, problem);
}

// Before the model is allocated: the plan's analytic memory (plan_memory, what --plan-only
// prints) against what each rank can have, the ranks of a host sharing its memory (or each
// its GPU's). --check adds the single-rank reference model on rank 0. A plan that does not fit
// is exit 2 on every rank, with the estimate; one that fits by this count can still run out
// (the estimate leaves out the MPI library, BLAS workspaces and the allocator), which ends the
// run with a named error instead (main).
void check_memory(const Options& o, const Plan& plan, const Compute& cp, const mb::comm::Topology& topo, int rank) {
  const mb::comm::RankGrid grid(plan.world, plan.mesh, plan.order);
  const auto pm = grid.membership(mb::comm::GroupKind::kPp, rank);
  const PlanMemory mine = plan_memory(plan, pm ? pm->index : 0);
  double need = mine.total();
  if (o.check && rank == 0 && plan.world > 1) {
    const MemoryBytes ref = Gpt<float>::memory_analytic(plan.model, 4);
    need += double(ref.params + ref.grads + ref.optimizer + ref.activations + ref.buffers);
  }
  const double have = double(cp.gpu ? mb::compute::device_memory_free() : mb::compute::host_memory_available());
  const int node = topo.ranks[static_cast<size_t>(rank)].node;
  std::vector<double> needs(static_cast<size_t>(plan.world)), haves(needs.size());
  std::vector<int> nodes(needs.size());
  MB_CHECK_MPI(MPI_Allgather(&need, 1, MPI_DOUBLE, needs.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD), "world");
  MB_CHECK_MPI(MPI_Allgather(&have, 1, MPI_DOUBLE, haves.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD), "world");
  MB_CHECK_MPI(MPI_Allgather(&node, 1, MPI_INT, nodes.data(), 1, MPI_INT, MPI_COMM_WORLD), "world");
  auto gib = [](double b) { return b / double(1 << 30); };
  std::string problem;
  if (cp.gpu) {  // one GPU per rank
    for (size_t r = 0; r < needs.size() && problem.empty(); ++r)
      if (haves[r] > 0 && needs[r] > haves[r])
        problem = fmt::format("the plan needs about {:.2f} GiB on rank {} (plan_memory: parameters, gradients, "
                              "optimizer, activations, buffers{}) but its GPU has {:.2f} GiB free; shrink the "
                              "model or raise the parallel degrees (step_bench --plan-only prints the estimate)",
                              gib(needs[r]), r, r == 0 && o.check ? ", and --check's reference model" : "", gib(haves[r]));
  } else {  // the ranks of a host share its memory
    std::map<int, std::pair<double, double>> by_node;  // node -> (sum of needs, least available seen)
    std::map<int, int> ranks_on;
    for (size_t r = 0; r < needs.size(); ++r) {
      auto [it, fresh] = by_node.try_emplace(nodes[r], 0.0, haves[r]);
      it->second.first += needs[r];
      it->second.second = std::min(it->second.second, haves[r]);
      ++ranks_on[nodes[r]];
    }
    for (const auto& [n, v] : by_node)
      if (problem.empty() && v.second > 0 && v.first > v.second) {
        std::string host;
        for (const auto& p : topo.ranks)
          if (p.node == n) host = p.host;
        problem = fmt::format("the plan needs about {:.2f} GiB on host {} ({} ranks, plan_memory per rank: "
                              "parameters, gradients, optimizer, activations, buffers{}) but the host has {:.2f} GiB "
                              "available (MemAvailable, or its cgroup's limit); shrink the model, raise the parallel "
                              "degrees or spread the ranks over more hosts (step_bench --plan-only prints the estimate)",
                              gib(v.first), host, ranks_on[n], o.check ? ", and --check's reference model on rank 0" : "",
                              gib(v.second));
      }
  }
  mb::comm::agree_or_throw(MPI_COMM_WORLD, problem);
}

// The run's last agreement: rank 0's write error, if any, ends every rank with exit 3.
void agree_written(const std::string& write_error) { mb::comm::agree_on_fault(MPI_COMM_WORLD, write_error); }

// options -> plan -> groups and sharded model -> check -> timed steps -> metrics -> reports.
int run(int argc, char** argv, int world_rank, int world_size, int thread_level) {
  std::optional<Options> parsed = parse_options(argc, argv);
  if (!parsed) return kExitOk;
  const Options& o = *parsed;
  if (o.plan_only)  // main() answers --plan-only before MPI starts; another spelling got here
    throw UsageError("--plan-only: write it as the flag --plan-only (or MESHBENCH_STEP_PLAN_ONLY=1)");
  const Plan plan = make_plan(o, world_size);
  if (plan.progress == Progress::kThread && thread_level < MPI_THREAD_MULTIPLE)
    throw UsageError("--progress thread: this MPI does not provide MPI_THREAD_MULTIPLE");
  mb::results::OutputClaim claim;
  claim_outputs(o, claim, world_rank);
  const mb::core::Log out(world_rank, o.quiet);
  const DataKind data = o.data == "repeat" ? DataKind::kRepeat : DataKind::kRandom;
  // The watchdog covers the set-up too; it restarts with the output file once that exists.
  mb::core::OpWatch watch;  // outlives every communicator that reports to it
  mb::core::OpWatch* watched = o.op_timeout > 0 ? &watch : nullptr;
  auto watch_with = [&](const std::string& output, const std::string& run_id) {
    if (!watched) return;
    // The dimension is the pending call's group's (results/hang.hpp: empty dim).
    const mb::results::HangSite site{world_rank, mb::comm::host_name(), "step_bench", "", o.op_timeout, output, run_id};
    watch.start(o.op_timeout, [site](const mb::core::Hang& h) { mb::results::report_hang(site, h); });
  };
  watch_with("", "");
  std::optional<mb::comm::WatchScope> setup_scope;
  const double setup_t0 = mb::core::now_seconds();
  setup_scope.emplace(watched, "set-up (topology, groups, model; collective)", 0, "world");
  mb::comm::Topology topo = mb::comm::discover_topology(MPI_COMM_WORLD, o.device);
  if (o.ranks_per_node > 0) mb::comm::emulate_nodes(topo, o.ranks_per_node);
  const Threads threads = set_threads(o, topo, world_rank);
  if (threads.oversubscribed) topo.oversubscribed = true;  // the run's `oversubscribed` covers threads too
  Compute cp;
  make_compute(cp, o, topo, world_rank);
  check_memory(o, plan, cp, topo, world_rank);
  Setup st;
  st.watch = watched;
  make_setup(st, o, plan, world_rank, *cp.backend, cp.device);
  setup_scope.reset();
  double setup_s[2] = {mb::core::now_seconds() - setup_t0, st.comm_setup_s};  // the slowest rank's
  MPI_Allreduce(MPI_IN_PLACE, setup_s, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (!o.export_dir.empty()) return run_export(o, *st.model, data, out);
  print_header(out, o, plan, st, cp, topo);
  out.out("  threads per rank: {} ({}){}\n", threads.n, threads.rule,
          threads.oversubscribed ? "; OVERSUBSCRIBED: more threads than cores on a host, times are not meaningful" : "");
  out.out("  set-up {:.3f} s (topology, communicators, model; slowest rank), of which communicators {:.3f} s\n",
          setup_s[0], setup_s[1]);
  const Peak peak = measure_peak(o.model, cp.gpu, cp.prec, cp.device);
  const double datasheet = cp.gpu ? cuda::datasheet_peak(cp.gpu_name, cp.prec) : NAN;
  print_peak(out, cp, peak, datasheet);

  StepEnv<float> env{*st.model, st.sync.get(), st.trace, plan, data, o.seed, st.dp_rank, o.adam};
  env.pipe = st.pipe ? &*st.pipe : nullptr;
  Outcome r;
  r.check = run_check(o, st, env, world_size, out, r.check_rows);
  mb::results::RunContext ctx = make_context(o, plan, cp, argc, argv, topo);
  // The results file: rank 0's alone, in memory and published whole (step_h5.hpp).
  std::unique_ptr<StepH5> h5;
  std::string write_error;
  if (!o.output.empty() && world_rank == 0) {
    try {
      h5 = std::make_unique<StepH5>(
          o.output, claim.appending(), ctx, world_size,
          step_attributes(o, plan, *st.model, omp_get_max_threads(), step_flops(o.model), peak, datasheet, cp.gpu_name, st),
          std::vector<std::string>(kPhaseNames.begin(), kPhaseNames.end()), describe_groups(st, topo));
      h5->write_step_attrs({{"setup_time_s", setup_s[0]}, {"comm_setup_time_s", setup_s[1]},
                            {"threads_rule", threads.rule}, {"threads_oversubscribed", threads.oversubscribed}});
      write_error = h5->error();
    } catch (const std::exception& e) {
      write_error = e.what();
    }
  }
  agree_written(write_error);
  mb::results::sync_from_root(ctx, MPI_COMM_WORLD);  // the run id, made unique in the file
  if (!o.output.empty()) watch_with(o.output, ctx.run_id);

  // Clock offsets against rank 0, for the trace's aligned timelines.
  // On one host every rank reads the same monotonic clock: the offset is exactly 0 (the
  // ping-pong estimate's error grows to milliseconds when the cores are oversubscribed).
  const bool one_host = std::all_of(topo.ranks.begin(), topo.ranks.end(),
                                    [&](const auto& p) { return p.host == topo.ranks.front().host; });
  mb::comm::ClockOffset clock = mb::comm::estimate_clock_offset(MPI_COMM_WORLD, 20);
  if (one_host) clock = {};
  if (h5) write_or_hold(*h5, [&] { h5->write_step_attrs({{"clock_shared_host", one_host}}); });
  double t_origin = mb::core::now_seconds() - clock.offset_s;  // on rank 0's clock
  MPI_Bcast(&t_origin, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  st.model->set_profiling(o.profile);
  std::vector<double> losses;
  r.end = timed_steps(o, env, st, h5.get(), losses, out);
  if (r.end.why & kStopWrite) agree_written(h5 ? h5->error() : std::string("the results file could not be written"));
  if (r.end.why & kStopTime)
    out.warn("step_bench: --time-limit {} s reached after {} of {} steps\n", o.time_limit, r.end.at_step + 1,
             o.warmup + o.steps);
  if (r.end.why & kStopSignal)
    out.warn("step_bench: stopped by a signal after {} of {} steps; the finished steps are saved\n",
             r.end.at_step + 1, o.warmup + o.steps);
  if (r.end.why & kStopDiverged)
    out.warn("step_bench: diverged at {}; status 'diverged', exit {}\n", r.end.detail,
             mb::core::code(ExitCode::kDiverged));

  // On a shared machine the GEMM rate drifts while the steps run: measure the peak again
  // after them and normalise by the higher of the two (the lower, conservative MFU).
  const Peak after = measure_peak(o.model, cp.gpu, cp.prec, cp.device);
  out.out("  {} peak again after the steps: best {:.2f} GFLOP/s (before {:.2f}); MFU uses the higher\n",
          cp.gpu ? "cuBLAS GEMM" : "SGEMM", after.best / 1e9, peak.best / 1e9);
  const double peak_used = std::max(peak.best, after.best);
  if (h5)
    write_or_hold(*h5, [&] {
      h5->write_step_attrs({{"peak_measured_flops_before", peak.best}, {"peak_measured_flops_after", after.best},
                            {"peak_measured_flops", peak_used}});
    });
  PipelineRow pipe;
  const RankMetrics rm = rank_metrics_of(st, world_rank, clock.offset_s, pipe);
  r.rec = gather_record(o, plan, st, rm, losses, peak_used);
  r.rec.split = gather_rows(split_rows(rm.split, world_rank), MPI_COMM_WORLD);
  if (st.pipe) r.rec.pipeline = gather_rows(std::vector<PipelineRow>{pipe}, MPI_COMM_WORLD);
  if (world_rank == 0 && r.rec.steps > 0) r.sum = summarize(r.rec, r.check, datasheet);
  r.mem = memory_rows(*st.model, plan, st.actions, st.pipe ? st.pipe->rank : 0);
  report_moe(o.model, st.model->moe().totals(), plan.degrees.tp, h5.get(), out);
  report_ep(st.model->moe().totals().ep, plan.degrees.ep, r.rec.steps, h5.get(), out, MPI_COMM_WORLD);
  if (h5 && write_error.empty() && !h5->error().empty()) write_error = h5->error();
  report(o, st, r, h5.get(), clock, t_origin, topo, out, world_rank, write_error);
  agree_written(write_error);
  if (watched) watch.stop();
  return verdict(r).second;
}

}  // namespace

int main(int argc, char** argv) {
  if (plan_only_requested(argc, argv)) return plan_only_main(argc, argv);  // no MPI (plan_only.hpp)
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  mb::core::set_fault_identity(rank, mb::comm::host_name());
  // SIGTERM (Slurm's time limit, scancel) and SIGINT stop the run at the next step boundary:
  // status 'killed', exit 3, the finished steps kept. A second signal takes its default action.
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  int rc = 0;
  try {
    rc = run(argc, argv, rank, size, provided);
  } catch (const UsageError& e) {
    if (rank == 0) std::fprintf(stderr, "step_bench: error: %s\n", e.what());
    rc = kExitUsage;
  } catch (const mb::core::OutputFault& e) {
    // Every rank agreed to stop here: no rank waits in a collective.
    if (rank == 0)
      std::fprintf(stderr, "step_bench: error: %s\n", e.what());
    rc = kExitRuntime;
  } catch (const mb::core::RuntimeFault& e) {
    std::fprintf(stderr, "step_bench: rank %d: %s\n", rank, e.what());
    rc = kExitRuntime;
  } catch (const std::bad_alloc&) {
    mb::core::fatal_runtime("memory allocation", "-",
                            "out of memory (the plan passed the memory check, which leaves out MPI, BLAS and the "
                            "allocator's own use: lower the model or raise the parallel degrees)");
  }
  // Results are on disk by now; a finalize that hangs (MPICH 4.0 over TCP) must not keep the job.
  if (g_signal.load() != 0 && rc == kExitRuntime) mb::comm::end_signalled_job(rank, rc, "step_bench");
  mb::comm::finalize_with_deadline(rank, rc, "step_bench");
  return rc;
}
