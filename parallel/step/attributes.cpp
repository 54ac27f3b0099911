#include "step/attributes.hpp"

#include "core/routing.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fmt/core.h>
#include <fmt/format.h>

#include "context_parallel/plan.hpp"
#include "pipeline_parallel/plan.hpp"
#include "predict/op_list.hpp"
#include "predict/replay.hpp"
#include "step/plan_memory.hpp"

namespace meshbench::parallel {

namespace {
double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

}  // namespace

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
  if (plan.experts_placed() && d.etp > 1) s += std::string(s.empty() ? "" : "+") + "expert_tensor_parallel";
  return s.empty() ? "single" : s;
}

std::string memory_formula(const Plan& plan) {
  const auto& d = plan.degrees;
  std::vector<std::string> held;
  if (d.tp > 1) held.push_back(fmt::format("its 1/{} tensor-parallel slices", d.tp));
  if (d.pp > 1) held.push_back("its pipeline stage's layers");
  if (d.ep > 1) held.push_back(fmt::format("its {} of {} experts", plan.model.experts / d.ep, plan.model.experts));
  if (plan.experts_placed() && d.etp > 1) held.push_back(fmt::format("1/{} of each expert's MLP", d.etp));
  const std::string of = held.empty() ? "the whole model" : fmt::format("{}", fmt::join(held, ", "));
  std::string state;
  switch (plan.zero) {
    case 1: state = "ZeRO-1: params 4, grads 4, optimizer 8/d bytes"; break;
    case 2: state = "ZeRO-2: params 4, grads 4/d (+ the units' full gradients while they are reduced), optimizer 8/d bytes"; break;
    case 3:
      state = plan.keep_params
                  ? "ZeRO-3 keeping its gathered units across the micro-batches: params 4/d + 4 (the whole stage from "
                    "its gather to the last backward), grads 4/d (+ units' full gradients while reduced; + 4/d scratch "
                    "with m > 1), optimizer 8/d bytes"
                  : "ZeRO-3: params 4/d (+ gathered units), grads 4/d (+ units' full gradients while reduced; + 4/d "
                    "scratch with m > 1), optimizer 8/d bytes";
      break;
    default: state = "params 4, grads 4, optimizer 8 bytes (16)"; break;
  }
  return fmt::format("fp32 with AdamW, per element of the flat array this rank holds ({}; padding included): {}{}", of,
                     state, plan.zero == 0 ? std::string()
                            : plan.experts_placed()
                                ? fmt::format(", d = dp x cp = {} (the experts' segments: d = edp = {})", d.dp * d.cp, d.edp)
                                : fmt::format(", d = dp x cp = {}", d.dp * d.cp));
}

double hardware_flops_per_step(const Plan& plan, const StepFlops& fl) {
  double again = plan.recompute == "selective" && plan.degrees.cp <= 1 ? fl.attention_forward : 0.0;
  if (plan.recompute == "full")  // each stage's recomputed blocks
    for (int r = 0; r < std::max(1, plan.degrees.pp); ++r) {
      const std::vector<char> rc = Gpt<float>::recomputed_blocks(plan.model, plan_rank_options(plan, r));
      for (int l = 0; l < plan.model.layers; ++l) again += rc[size_t(l)] ? block_forward_flops(plan.model, l) : 0.0;
    }
  return (fl.total() + again) * plan.micro_batches * plan.degrees.dp;
}

namespace {

// The GEMM peak MFU is measured against (step/peak.hpp): both GEMMs' rates and the rule.
nlohmann::ordered_json peak_attributes(const Peak& peak, bool gpu, double datasheet, const std::string& gpu_name) {
  return nlohmann::ordered_json{
      {"peak_measured_flops", peak.best}, {"peak_measured_median_flops", peak.median},
      {"peak_measured_reps", peak.reps},
      {"peak_rule", fmt::format("the best {} rate of two GEMMs in the step's dtype, the step's largest and a square "
                                "reference ({}), measured before and after the timed steps; MFU uses the higher",
                                gpu ? "cuBLAS" : "sgemm",
                                gpu ? fmt::format("{}^3", kSquareGpu)
                                    : fmt::format("{}^3 on the CPU, where {}^3 takes seconds", kSquareCpu, kSquareGpu))},
      {"peak_mfu_basis", peak.basis},
      {"peak_gemm", fmt::format("{} {}x{}x{} {}", peak.shape.name, peak.shape.M, peak.shape.N, peak.shape.K,
                                gpu ? "cublas" : "sgemm")},
      {"peak_largest_gemm", fmt::format("{} {}x{}x{}", peak.largest.shape.name, peak.largest.shape.M,
                                        peak.largest.shape.N, peak.largest.shape.K)},
      {"peak_largest_gemm_flops", peak.largest.best}, {"peak_largest_gemm_median_flops", peak.largest.median},
      {"peak_largest_gemm_reps", peak.largest.reps},
      {"peak_square_gemm", fmt::format("{}x{}x{}", peak.square.shape.M, peak.square.shape.N, peak.square.shape.K)},
      {"peak_square_flops", peak.square.best}, {"peak_square_median_flops", peak.square.median},
      {"peak_square_reps", peak.square.reps},
      {"peak_datasheet_flops", datasheet},
      {"peak_datasheet_source", gpu ? "NVIDIA datasheet dense peak by device name: " + gpu_name : "none (cpu)"},
      {"gpu", gpu_name}};
}

// How the step's compute ran: the model's own, or modelled durations (--compute modelled).
nlohmann::ordered_json compute_attributes(const Setup& st) {
  const bool modelled = st.replay != nullptr;
  return nlohmann::ordered_json{
      {"compute_mode", modelled ? "modelled" : "real"},
      {"compute_source", modelled ? st.costs->source() : std::string()},
      {"compute_wire", modelled ? st.costs->wire_rule() : std::string("fp32 (the engine's)")},
      {"compute_wait", modelled ? fmt::format("each run of compute actions waits the sum of their modelled durations "
                                              "to an absolute deadline: sleeps to within {:.0f} us, spins the rest "
                                              "(the core is free, as a GPU host's; no MPI call while waiting)",
                                              kSpinSeconds * 1e6)
                                : std::string("the model computes (real)")},
      {"memory_measured", !modelled}};
}

}  // namespace

nlohmann::ordered_json step_attributes(const Options& o, const Plan& plan, const Gpt<float>* model, int threads,
                                       const StepFlops& fl, const Peak& peak, double datasheet,
                                       const std::string& gpu_name, const Setup& st) {
  const GptConfig& c = plan.model;
  // --compute modelled allocates no model: its shapes from the plan's layout (rank 0's stage)
  const int pp_rank = st.pipe ? st.pipe->rank : 0;
  const GptOptions mo = plan_rank_options(plan, pp_rank);
  const int64_t params = model ? model->num_params() : Gpt<float>::layout_of(c, mo).numel();
  const int64_t grad_elements = model ? model->layout().total() : Gpt<float>::flat_elements(c, mo);
  const int64_t vocab_local = model ? model->tp_dims().vocab : tp_dims(c, mo.tp, mo.cp).vocab;
  int buckets = st.dp ? st.dp->buckets() : (st.zero && model ? int(model->units().size()) : 0);
  if (!model && plan.degrees.dp * plan.degrees.cp > 1) {
    const SyncItems sync = sync_items(plan, pp_rank);
    buckets = plan.zero > 0 ? int(Gpt<float>::units_of(c, mo).size())
                            : int(std::count_if(sync.grad_sync.begin(), sync.grad_sync.end(),
                                                [](const PassItem& it) { return it.dim == "dp"; }));
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const bool gpu = o.device == "cuda";
  const auto& d = plan.degrees;
  nlohmann::ordered_json a{
      {"preset", o.preset}, {"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
      {"kv_heads", c.kv_heads}, {"ffn", c.ffn}, {"seq", c.seq}, {"max_seq", c.max_seq},
      {"vocab", c.vocab}, {"micro_batch", c.micro_batch}, {"tied", c.tied},
      {"experts", c.experts}, {"top_k", c.top_k}, {"moe_every", c.moe_every},
      {"capacity_factor", c.capacity_factor}, {"moe_capacity", moe_capacity(c)}, {"aux_loss_coef", c.aux_loss_coef},
      {"parameters", params}, {"grad_elements", grad_elements}, {"device", o.device}, {"dtype", o.dtype},
      {"threads", threads}, {"openblas_coretype", coretype ? coretype : ""},
      {"data", o.data}, {"seed", o.seed}, {"lr", o.adam.lr}, {"beta1", o.adam.beta1},
      {"beta2", o.adam.beta2}, {"eps", o.adam.eps}, {"weight_decay", o.adam.weight_decay},
      {"strategy", strategy_name(plan)},
      {"device_timing", gpu ? "synchronized boundaries: each phase ends after a stream synchronize, and a blocking "
                              "collective on device memory after its communicator's stream is synchronized; "
                              "non-blocking ones are stamped when a test or wait first sees them done (no CUDA events)"
                            : "host clock: the CPU backend runs each op inside its call"}, {"cp_algo", cp_algo_name(plan.cp_algo)},
      {"cp_split", plan.cp_zigzag ? "zigzag" : "contiguous"},
      {"routing", core::name(plan.routing)},
      {"megatron_activation_bytes", megatron_activation_bytes_per_layer(plan) * c.layers},
      {"megatron_activation_formula", "L " + megatron_activation_formula(plan)},
      {"sequence_parallel", plan.sp}, {"sp_regather", plan.sp_regather},
      {"vocab_padded", vocab_local * d.tp},
      {"vocab_padding_rule", "tensor parallel pads the vocabulary to a multiple of tp; padded rows are zero, masked out of the loss and dropped by --check"},
      {"degrees", nlohmann::ordered_json{{"dp", d.dp}, {"tp", d.tp}, {"pp", d.pp}, {"cp", d.cp}, {"ep", d.ep}}},
      {"expert_degrees", nlohmann::ordered_json{{"etp", d.etp}, {"ep", d.ep}, {"edp", d.edp}}},
      {"order", plan.order}, {"schedule", d.pp > 1 ? name(plan.schedule) : "accumulate"},
      {"vpp", plan.vpp}, {"vpp_group", plan.vpp_group > 0 ? plan.vpp_group : d.pp},
      {"layers_per_stage", layers_per_virtual_stage(plan)},
      {"schedule_actions", to_string(st.actions)}, {"microbatches", plan.micro_batches},
      {"global_batch", plan.global_batch()}, {"grad_reduce", o.grad_reduce}, {"overlap", plan.overlap},
      {"progress", o.progress}, {"buckets", buckets},
      {"bucket_elements", st.dp ? st.dp->bucket_elements() : 0},
      {"zero_stage", plan.zero}, {"prefetch", plan.prefetch}, {"zero3_keep_params", plan.keep_params},
      {"zero_shard_elements", st.zero ? st.zero->shard_elements() : 0},
      {"zero_padding_elements", st.zero ? st.zero->padding_elements() : 0},
      {"zero_units", "embeddings, each block, the head; each padded to a multiple of 16 x dp elements and split evenly"},
      {"memory_formula", memory_formula(plan)},
      {"bucket_rule", "--bucket-mb, else a quarter of the gradient elements clamped to [16 Ki, 40 M], rounded up to 64"},
      {"grad_bytes_padding", "the flat gradient array, each tensor aligned to 16 elements"},
      {"flops_per_step", fl.total() * plan.micro_batches * d.dp}, {"flops_per_microbatch", fl.total()},
      {"flops_per_step_hardware", hardware_flops_per_step(plan, fl)},
      {"attention", plan.flash ? "flash" : "naive"}, {"attention_rule", plan.attention_rule}, {"recompute", plan.recompute},
      {"recompute_layers", plan.recompute == "full" ? plan.recompute_layers : 0},
      {"flops_hardware_rule", "the model's FLOPs plus what --recompute runs again per micro-batch (selective: the "
                              "attention forward's products; full: each recomputed block's forward GEMMs and "
                              "attention products)"},
      {"flops_forward_gemm", fl.forward_gemm},
      {"flops_backward_gemm", fl.backward_gemm}, {"flops_attention_forward", fl.attention_forward},
      {"flops_attention_backward", fl.attention_backward},
      {"flops_formula", "2*M*N*K per GEMM; fwd linears x3 (fwd, dinput, dweight); attention "
                        "QK^T,PV fwd + 4 bwd products in causal 64-row blocks; per micro-batch x m x dp"}};
  a.update(peak_attributes(peak, gpu, datasheet, gpu_name));
  a.update(compute_attributes(st));
  return a;
}

std::vector<MemoryRow> memory_rows(const Gpt<float>* model, const Plan& plan, const std::vector<Action>& actions,
                                   int pp_rank) {
  const PlanMemory pm = plan_memory(plan, pp_rank);
  const double ap = pm.params, ag = pm.grads, ao = pm.optimizer, ab = pm.buffers;
  if (!model)  // --compute modelled: the analytic figures only, nothing measured (NaN)
    return {{"params", NAN, ap},           {"grads", NAN, ag},        {"optimizer", NAN, ao},
            {"activations", NAN, pm.activations}, {"buffers", NAN, ab}, {"engine_peak", NAN, NAN},
            {"process_peak_rss", peak_rss_bytes(), NAN}};
  const MemoryTracker& t = model->memory();
  auto peak = [&](MemCat k) { return double(t.peak[static_cast<int>(k)]); };
  double aa = pm.activations;
  if (plan.degrees.pp > 1) {
    std::vector<int64_t> slot;
    for (int k = 0; k < model->num_chunks(); ++k) slot.push_back(model->slot_elements(k) * 4);
    aa = double(scheduled_activation_peak(actions, slot) + model->moe().state_bytes());
  }
  return {{"params", peak(MemCat::kParams), ap},
          {"grads", peak(MemCat::kGrads), ag},
          {"optimizer", peak(MemCat::kOptimizer), ao},
          {"activations", peak(MemCat::kActivations), aa},
          {"buffers", peak(MemCat::kBuffers), ab},
          {"engine_peak", double(t.total_peak), NAN},
          {"process_peak_rss", peak_rss_bytes(), NAN}};
}

std::string megatron_activation_formula(const Plan& plan) {
  if (plan.degrees.tp <= 1) return "sbh(34 + 5as/h)";
  return plan.sp ? "sbh(34 + 5as/h)/t" : "sbh(10 + 24/t + 5as/(ht))";
}

std::string moe_shape(const GptConfig& c) {
  return fmt::format("{} MoE blocks x {} experts, top-{}, capacity {}", c.moe_blocks(), c.experts, c.top_k,
                     moe_capacity(c) > 0 ? fmt::format("{} rows/expert", moe_capacity(c)) : std::string("dropless"));
}

}  // namespace meshbench::parallel
