#include "step/plan_only.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <vector>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/core.h>

#include "compute/device.hpp"
#include "core/error.hpp"
#include "model/model.hpp"
#include "pipeline_parallel/plan.hpp"
#include "step/options.hpp"
#include "metrics/metrics.hpp"
#include "predict/predict.hpp"
#include "step/plan_memory.hpp"
#include "step/rules.hpp"

namespace meshbench::parallel {

bool plan_only_requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--plan-only") == 0) return true;
  const char* env = std::getenv("MESHBENCH_STEP_PLAN_ONLY");
  if (env == nullptr) return false;
  const std::string v = env;
  return v == "1" || v == "true" || v == "on" || v == "yes";
}

namespace {

nlohmann::ordered_json memory_json(const PlanMemory& m) {
  return {{"pp_rank", m.pp_rank},   {"params", m.params},   {"grads", m.grads},
          {"optimizer", m.optimizer}, {"activations", m.activations}, {"buffers", m.buffers},
          {"total", m.total()}};
}

nlohmann::ordered_json model_json(const GptConfig& c, const std::string& preset) {
  return {{"preset", preset},     {"layers", c.layers}, {"hidden", c.hidden},   {"heads", c.heads},
          {"kv_heads", c.kv_heads}, {"ffn", c.ffn},       {"seq", c.seq},         {"vocab", c.vocab},
          {"micro_batch", c.micro_batch}, {"experts", c.experts}, {"top_k", c.top_k},
          {"parameters", Gpt<float>::full_layout(c).numel()}};
}

}  // namespace

nlohmann::ordered_json prediction_json(const Prediction& p, const Plan* plan) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const RankPrediction& r : p.per_rank) {
    nlohmann::ordered_json phases;
    for (size_t i = 0; i < kPhaseNames.size(); ++i) phases[kPhaseNames[i]] = r.phases[i];
    ranks.push_back({{"pp_rank", r.pp_rank}, {"step_time_s", r.step_s}, {"compute_s", r.compute_s},
                     {"bubble_s", r.bubble_s}, {"exposed_s", r.exposed}, {"phases", phases}});
  }
  nlohmann::ordered_json j = {{"step_time_s", p.step_time_s}, {"tokens_per_s", p.tokens_per_s}, {"exposed_s", p.exposed_s},
          {"bubble", p.bubble}, {"per_rank", ranks}, {"extrapolated", p.extrapolated},
          {"extrapolated_what", p.extrapolated_what}, {"notes", p.notes}, {"calibration", p.calibration},
          {"fabric", p.fabric}};
  if (p.cluster) {
    const ClusterFigures& c = *p.cluster;
    j["cluster"] = c.cluster;
    j["efficiency_source"] = c.efficiency_source;
    j["mfu"] = c.mfu;
    j["hfu"] = c.hfu;
    j["model_flops_per_gpu_s"] = c.model_flops_per_gpu_s;
    j["hardware_flops_per_gpu_s"] = c.hardware_flops_per_gpu_s;
    j["crosses_nodes"] = c.crosses_nodes;
    if (plan != nullptr) {  // memory per stage against the GPU's HBM (mixed precision, flash attention)
      nlohmann::ordered_json stages = nlohmann::ordered_json::array();
      bool fits = true;
      for (const PlanMemory& m : gpu_plan_memory_per_stage(*plan)) {
        stages.push_back(memory_json(m));
        fits = fits && m.total() <= c.hbm_bytes;
      }
      j["memory_per_stage"] = stages;
      j["memory_rule"] = "GPU bytes per rank (plan_memory.hpp gpu_plan_memory): bf16 weights, fp32 gradients, fp32 "
                         "master and AdamW moments, ZeRO-sharded; activations per Korthikanti et al. 2022 without the "
                         "attention matrix (flash), the schedule's micro-batches in flight";
      j["hbm_bytes"] = c.hbm_bytes;
      j["feasible"] = fits;
    }
  }
  return j;
}

nlohmann::ordered_json op_list_json(const Plan& plan) {
  nlohmann::ordered_json v = nlohmann::ordered_json::array();
  for (const OpTotal& o : step_op_list(plan, 0)) {
    // attention counts FLOPs, except its rowdot (D = rowsum(dO o): elements, as the elementwise ops)
    const bool flops = o.op == Op::kMatmul || (o.op == Op::kAttention && o.part != "rowdot");
    v.push_back({{"op", op_name(o.op)}, {"phase", std::string(1, o.phase)}, {"part", o.part},
                 {"elements", flops ? 0.0 : o.units}, {"flops", flops ? o.units : 0.0},
                 {"m", o.m}, {"n", o.n}, {"k", o.k}, {"calls", o.calls}});
  }
  return v;
}

nlohmann::ordered_json plan_json(const Plan& plan, const std::string& preset) {
  const GptConfig& c = plan.model;
  const comm::Degrees& d = plan.degrees;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const PlanMemory& m : plan_memory_per_stage(plan)) stages.push_back(memory_json(m));
  return {
      {"valid", true},
      {"world", plan.world},
      {"degrees", {{"tp", d.tp}, {"cp", d.cp}, {"ep", d.ep}, {"dp", d.dp}, {"pp", d.pp}, {"etp", d.etp}, {"edp", d.edp}}},
      {"order", plan.order},
      {"mesh", comm::format_degrees(d)},
      {"micro_batch", c.micro_batch},
      {"micro_batches", plan.micro_batches},
      {"global_batch", plan.global_batch()},
      {"tokens_per_step", plan.global_tokens()},
      {"schedule", d.pp > 1 ? name(plan.schedule) : "accumulate"},
      {"vpp", plan.vpp},
      {"vpp_group", plan.vpp_group > 0 ? plan.vpp_group : d.pp},
      {"layers_per_stage", layers_per_virtual_stage(plan)},
      {"zero", plan.zero},
      {"recompute", plan.recompute}, {"attention", plan.flash ? "flash" : "naive"},
      {"sp", plan.sp},
      {"cp_algo", cp_algo_name(plan.cp_algo)},
      {"model", model_json(c, preset)},
      {"plan", describe(plan)},
      {"memory", memory_json(plan_memory_worst(plan))},
      {"memory_per_stage", stages},
      {"memory_rule", "analytic bytes per rank (plan_memory.hpp): fp32 params, grads and AdamW moments of the "
                      "rank's slice (ZeRO-sharded, its pipeline stage), activations held at the schedule's peak, "
                      "backward and pipeline buffers; memory is the stage with the largest total"}};
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The one plan's verdict for a person, on stderr (stdout keeps the one JSON object scripts
// read): valid or not, the memory of the largest stage against what it runs on (the cluster's
// GPU with --predict CLUSTER, else this host's available memory shared by the --world ranks,
// as a real run here would share it), the predicted step and MFU.
void print_summary(const nlohmann::ordered_json& j, int world) {
  if (!j.value("valid", false)) {
    std::fprintf(stderr, "plan: invalid: %s\n", j.value("error", std::string("?")).c_str());
    return;
  }
  const std::string plan = j.value("plan", std::string());
  std::fprintf(stderr, "plan: valid at %d ranks: %s\n", world, plan.c_str());
  if (j.contains("notes"))
    for (const auto& n : j["notes"]) std::fprintf(stderr, "  note: %s\n", n.get<std::string>().c_str());
  const nlohmann::ordered_json* p = j.contains("predicted") ? &j["predicted"] : nullptr;
  if (p && p->contains("hbm_bytes") && p->contains("memory_per_stage")) {
    double worst = 0;
    for (const auto& m : (*p)["memory_per_stage"]) worst = std::max(worst, m["total"].get<double>());
    const bool fits = (*p)["feasible"].get<bool>();
    std::fprintf(stderr, "  memory: %.1f GiB per GPU (the largest stage) against the %s GPU's %.1f GiB: %s\n",
                 worst / kGiB, (*p)["cluster"].get<std::string>().c_str(), (*p)["hbm_bytes"].get<double>() / kGiB,
                 fits ? "fits" : "does NOT fit");
    if (!fits)
      std::fprintf(stderr, "  warning: the plan does not fit the GPU's memory (feasible: false): raise the parallel "
                           "degrees, ZeRO or recompute, or lower the micro-batch\n");
  } else {
    const double need = j["memory"]["total"].get<double>();
    const double have = static_cast<double>(compute::host_memory_available());
    const double share = have / std::max(1, world);
    std::fprintf(stderr, "  memory: %.3f GiB per rank (the largest stage, CPU fp32); this host has %.1f GiB "
                         "available, %.3f GiB per rank at %d ranks here: %s\n",
                 need / kGiB, have / kGiB, share / kGiB, world, need <= share ? "fits" : "does NOT fit");
  }
  if (p && p->contains("step_time_s")) {
    std::string mfu;
    if (p->contains("mfu")) mfu = fmt::format(", MFU {:.1f}%", 100 * (*p)["mfu"].get<double>());
    const double t = (*p)["step_time_s"].get<double>();
    const std::string step = t >= 1 ? fmt::format("{:.2f} s", t) : fmt::format("{:.2f} ms", t * 1e3);
    std::fprintf(stderr, "  predicted: step %s, %.0f tokens/s%s (%s)\n", step.c_str(), (*p)["tokens_per_s"].get<double>(),
                 mfu.c_str(), (*p)["calibration"].get<std::string>().c_str());
  }
}

// One plan: its JSON on stdout; 0 valid, 2 invalid, -1 after --help.
int answer(std::vector<char*> args, bool summary) {
  nlohmann::ordered_json out;
  int rc = 0;
  std::optional<Options> o;
  try {
    o = parse_options(static_cast<int>(args.size()), args.data());
    if (!o) return -1;
    const Plan plan = make_plan(*o, o->world > 0 ? o->world : 1);
    out = plan_json(plan, o->preset);
    out["notes"] = plan_notes(plan);
    if (o->op_list) {
      out["op_list"] = op_list_json(plan);
      nlohmann::ordered_json cl = nlohmann::ordered_json::array();
      for (const CommTotal& c : step_comm_list(plan, 0))
        cl.push_back({{"dim", c.dim}, {"collective", c.collective}, {"phase", std::string(1, c.phase)},
                      {"bytes", c.bytes}, {"group", c.group}, {"calls", c.calls}});
      out["comm_list"] = cl;
    }
    if (!o->predict.empty()) {
      try {
        const std::unique_ptr<Costs> costs = read_costs(o->predict, o->predict_fabric, plan);
        out["predicted"] = prediction_json(predict_step(plan, *costs), &plan);
      } catch (const core::UsageError& e) {  // the calibration cannot predict it: a real run refuses too
        out["valid"] = false;
        out["error"] = e.what();
        out["predicted"] = {{"error", e.what()}};
        std::fprintf(stderr, "step_bench: error: %s\n", e.what());
        rc = core::code(core::ExitCode::kUsage);
        summary = false;  // the one line above says it
      }
    }
  } catch (const core::UsageError& e) {
    out = {{"valid", false}, {"error", e.what()}};
    if (o) out["model"] = model_json(o->model, o->preset);  // the options parsed: the plan broke a rule
    rc = core::code(core::ExitCode::kUsage);
  }
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  if (summary) print_summary(out, o && o->world > 0 ? o->world : 1);
  return rc;
}

}  // namespace

int plan_only_main(int argc, char** argv) {
  std::vector<char*> base(argv, argv + argc);
  if (std::find_if(base.begin(), base.end(), [](const char* a) { return std::strcmp(a, "--plan-stdin") == 0; }) ==
      base.end()) {
    const int rc = answer(base, true);
    return rc < 0 ? 0 : rc;
  }
  // --plan-stdin: the process loads once (the CUDA libraries make a start cost ~0.5 s), so a
  // sweep asks about every candidate in one call. Each line's words follow the command line's.
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    std::vector<std::string> extra{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
    std::vector<char*> args = base;
    for (std::string& w : extra) args.push_back(w.data());
    answer(args, false);
  }
  return 0;
}

}  // namespace meshbench::parallel
