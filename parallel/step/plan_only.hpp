// step_bench --plan-only: the plan a run would make for --world ranks, validated by the same
// make_plan / resolve_and_validate, printed as one JSON object on stdout with its analytic
// memory per rank (plan_memory.hpp); exit 0 when valid, 2 with {"valid": false, "error": the
// message a real run prints, and "model" when the options parsed} when not. Runs before
// MPI_Init: no MPI, no communicator, no model. With --plan-stdin it answers one plan per line of stdin (one JSON line each), so
// scripts/sweep asks about thousands of candidates in one process.
// Not here: running anything (step_bench.cpp), the rules themselves (plan.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include "common/plan.hpp"

namespace meshbench::parallel {

// Whether argv (or MESHBENCH_STEP_PLAN_ONLY) asks for --plan-only; read before MPI_Init, so
// even an option the parser refuses is answered as JSON.
bool plan_only_requested(int argc, char** argv);

// The JSON object of a valid plan (degrees, order, batch, schedule, ZeRO, memory per stage).
nlohmann::ordered_json plan_json(const Plan& plan, const std::string& preset);

// --predict's object (predict.hpp's Prediction) and --op-list's array, as the JSON carries them.
struct Prediction;
// With `plan` and a cluster's prediction, also the memory per stage against the GPU's HBM.
nlohmann::ordered_json prediction_json(const Prediction& p, const Plan* plan = nullptr);
nlohmann::ordered_json op_list_json(const Plan& plan);

// Parses argv, makes the plan, prints the JSON; returns the exit code (0 valid, 2 invalid;
// --plan-stdin: 0, each line's validity is in its JSON).
int plan_only_main(int argc, char** argv);

}  // namespace meshbench::parallel
