// step_bench's options: one CLI11 table (help text generated from it, every option also read
// from MESHBENCH_STEP_<OPTION>, or MESHBENCH_<OPTION> for the options every binary shares), the model shape resolved from a preset and the flags given, the
// rules a single option must satisfy, and the Plan they make (plan.hpp checks the rules
// that involve the world size). Not here: running anything.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "comm/mesh.hpp"
#include "core/cli.hpp"
#include "kernels/layers.hpp"
#include "model/model.hpp"
#include "common/config.hpp"
#include "common/plan.hpp"

namespace meshbench::parallel {

struct Options {
  GptConfig model;
  std::string preset = "tiny";
  int steps = 10, warmup = 2, threads = 0;
  std::string device = "cpu", dtype = "fp32", output, tag, export_dir, data = "random";
  // Flags every meshbench binary shares (docs/architecture.md); at one rank only their defaults run.
  std::string mesh, order = std::string(comm::kDefaultOrder), group = "world", backend = "mpi";
  double time_limit = 0;
  int ranks_per_node = 0;
  bool append = false, check = false, profile = false, quiet = false;
  uint64_t seed = 1234;
  AdamWConfig adam;
  // The parallel step.
  int micro_batches = 1;
  std::string grad_reduce = "avg", progress = "poll", trace_file;
  bool no_overlap = false;
  bool sp = false, sp_regather = true;
  std::string cp_algo = "ring", cp_split = "zigzag";
  std::string routing = "learned";  // MoE routing workload (core/routing.hpp)
  double bucket_mb = 0;
  int zero = 0, prefetch = 1;
  bool keep_params = false, regather = false;  // --zero3-keep-params, --zero3-regather
  std::string recompute = "none";              // --recompute (Plan::recompute)
  int recompute_layers = 0;                    // --recompute-layers (Plan::recompute_layers; 0: all)
  std::string attention;                       // --attention flash|naive (Plan::flash); empty: not given (flash, or on
                                               // --device cuda the faster by a set-up timing: issue 44, item 9)
  double op_timeout = 300;  // seconds a communication call may stay pending (0: no watchdog)
  int inject_fault = -1;  // hidden: corrupt one gradient element on this rank
  int inject_stall = -1;  // hidden: this rank spins in its first timed step's forward, never progressing (tests)
  // Pipeline parallel.
  std::string schedule = "1f1b", layers_per_stage;
  int vpp = 1, vpp_group = 0;
  // --plan-only: print the validated plan and its analytic memory as JSON, run nothing
  // (plan_only.hpp); --world: the world size it plans for (a real run: must be mpiexec's).
  bool plan_only = false, plan_stdin = false;
  int world = 0;
  // --predict CAL: the step model's prediction from a calibration file (predict/); with
  // --plan-only in the JSON, on a real run beside the measurement. --predict-fabric: the fits'
  // tag. --op-list (with --plan-only): the step's compute ops per (op, phase, part).
  std::string predict, predict_fabric;
  bool op_list = false;
  // --compute modelled: every compute action a wait of the --predict file's duration, the
  // communication real (predict/replay.hpp, docs/modelled.md); "real" runs the model.
  std::string compute = "real";
  core::EnvSources env;  // the options set by MESHBENCH_* variables, for error messages
};

// Parses argv; nullopt after --help. Throws core::UsageError for anything wrong.
std::optional<Options> parse_options(int argc, char** argv);

// The plan of a run on `world` ranks; throws UsageError naming the options and the rule.
Plan make_plan(const Options& o, int world);

// --data: the synthetic batches' kind.
inline DataKind data_kind(const Options& o) { return o.data == "repeat" ? DataKind::kRepeat : DataKind::kRandom; }

}  // namespace meshbench::parallel
