// --check: the numerics of a step against a reference, by normalised error per tensor
// (||a - ref|| / ||ref||) with a stated tolerance. At one rank the float32 step is compared
// with a float64 run of the same step (1e-4); on several ranks the parallel step is compared
// with the single-rank reference on rank 0, which runs the same global batch from the same
// canonical weights as m x dp micro-batches of gradient accumulation (1e-5): the loss,
// every parameter gradient of every rank put back into the full model's layout by name
// (sharding.hpp: tensor-parallel slices, a rank's pipeline stage or experts, ZeRO shards),
// compared over the elements that rank holds, and the parameters after its optimizer step
// against AdamW step 1 applied to the canonical weights and that rank's own (reduced)
// gradients, which proves the optimizer (replicated or ZeRO-sharded) without letting AdamW's
// g/(|g| + eps) amplify a gradient's last-bit difference into an lr-sized one; a coverage row
// fails when some element of the full model is held by no rank. Rows go to
// step/check; a failed row makes the run exit 1.
// Not here: the strategies being checked, output.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "core/log.hpp"
#include "executor/executor.hpp"
#include "metrics/records.hpp"
#include "model/model.hpp"
#include "step/options.hpp"
#include "step/setup.hpp"

namespace meshbench::parallel {

inline constexpr double kParallelTolerance = 1e-5;  // fp32 parallel vs fp32 single rank
inline constexpr double kFp64Tolerance = 1e-4;      // fp32 vs fp64, one rank

// Normalised L2 error of a against ref (n elements); max_abs receives the largest |a - ref|.
template <typename A, typename R>
double rel_err(const A* a, const R* ref, int64_t n, double* max_abs);

// One rank: a float32 step against the float64 instantiation on the same weights and tokens.
std::vector<CheckRow> check_against_fp64(Gpt<float>& m32, const int32_t* tok, const int32_t* tgt);

// Several ranks (collective over `world`): one step of the plan on every rank against the
// single-rank reference on rank 0. Leaves the model's weights as the step left them; every
// rank returns the same rows.
std::vector<CheckRow> check_against_reference(StepEnv<float>& env, const std::vector<Action>& actions,
                                              MPI_Comm world);

bool all_pass(const std::vector<CheckRow>& rows);

// --check before timing, on every rank (collective over MPI_COMM_WORLD): on one rank without a
// strategy the fp64 comparison (on a GPU: the CPU float32 step), else check_against_reference,
// after which the model gets the canonical weights back. Prints the failing rows and the
// summary rows; returns "pass", "fail" or "off" (no --check) and the rows.
std::string run_check(const Options& o, Setup& st, StepEnv<float>& env, const core::Log& out,
                      std::vector<CheckRow>& rows);

}  // namespace meshbench::parallel
