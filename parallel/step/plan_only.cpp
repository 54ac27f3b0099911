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

#include "core/error.hpp"
#include "model/model.hpp"
#include "pipeline_parallel/pipeline_parallel.hpp"
#include "step/options.hpp"
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

// One plan: its JSON on stdout; 0 valid, 2 invalid, -1 after --help.
int answer(std::vector<char*> args) {
  nlohmann::ordered_json out;
  int rc = 0;
  std::optional<Options> o;
  try {
    o = parse_options(static_cast<int>(args.size()), args.data());
    if (!o) return -1;
    out = plan_json(make_plan(*o, o->world > 0 ? o->world : 1), o->preset);
  } catch (const core::UsageError& e) {
    out = {{"valid", false}, {"error", e.what()}};
    if (o) out["model"] = model_json(o->model, o->preset);  // the options parsed: the plan broke a rule
    rc = core::code(core::ExitCode::kUsage);
  }
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  return rc;
}

}  // namespace

int plan_only_main(int argc, char** argv) {
  std::vector<char*> base(argv, argv + argc);
  if (std::find_if(base.begin(), base.end(), [](const char* a) { return std::strcmp(a, "--plan-stdin") == 0; }) ==
      base.end()) {
    const int rc = answer(base);
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
    answer(args);
  }
  return 0;
}

}  // namespace meshbench::parallel
