// What a step run states about itself: the step/ attributes of the results file (the model,
// plan, FLOPs and peaks, and the rules behind every derived number), the strategy's name,
// the closed form of its memory in words, Megatron's activation formula beside the measured
// activations, and this rank's memory rows (measured peaks beside plan_memory's closed forms).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/flops.hpp"
#include "metrics/records.hpp"
#include "step/options.hpp"
#include "step/peak.hpp"
#include "step/setup.hpp"

namespace meshbench::parallel {

// "zero2+tensor_parallel_sp", "data_parallel", "single", ...
std::string strategy_name(const Plan& plan);
// The params, grads and optimizer rows' closed form, in words.
std::string memory_formula(const Plan& plan);

// Megatron's activation memory per layer per micro-batch (docs/tensor_parallel.md; 16-bit activations
// with dropout masks, bytes): sbh(34 + 5as/h) without TP, sbh(10 + 24/t + 5as/(ht)) with TP,
// sbh(34 + 5as/h)/t with TP + SP; and that formula as text.
double megatron_activation_bytes_per_layer(const Plan& plan);
std::string megatron_activation_formula(const Plan& plan);

// The hardware FLOPs of one step, all ranks: the model's plus what --recompute runs again in
// the engine (selective: each micro-batch's attention forward; full is not run).
double hardware_flops_per_step(const Plan& plan, const StepFlops& fl);

nlohmann::ordered_json step_attributes(const Options& o, const Plan& plan, const Gpt<float>* model, int threads,
                                       const StepFlops& fl, const Peak& peak, double datasheet,
                                       const std::string& gpu_name, const Setup& st);

// The memory of this rank per category: the peak bytes allocated during the timed steps,
// beside the analytic value. Parameters, gradients, optimizer state and buffers come from
// plan_memory (the closed forms --plan-only prints and the sweep prunes by, so a run checks
// them); pipeline activations from the slots this stage's schedule holds at its peak, sized
// by the model that was built, plus the MoE routing state kept per micro-batch.
std::vector<MemoryRow> memory_rows(const Gpt<float>* model, const Plan& plan, const std::vector<Action>& actions,
                                   int pp_rank);

// The MoE blocks in words, for the console's moe line.
std::string moe_shape(const GptConfig& c);

}  // namespace meshbench::parallel
