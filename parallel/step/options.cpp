#include "step/options.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "core/cli.hpp"
#include "core/error.hpp"
#include "pipeline_parallel/plan.hpp"
#include "results/output_path.hpp"
#include "step/rules.hpp"
#include "kernels/attention_choice.hpp"

namespace meshbench::parallel {

namespace mb = meshbench;
using core::UsageError;

namespace {

// The environment names of step_bench's options (core/cli.hpp): an option every binary shares
// with the same meaning (the output, the tag, the mesh, the time limits) reads MESHBENCH_<OPTION>,
// as the collectives do; step_bench's own options read MESHBENCH_STEP_<OPTION>, so a variable
// set for the collectives in one sbatch file (MESHBENCH_WARMUP=auto: warm-up calls) never
// reaches step_bench, whose --warmup counts steps.
CLI::Option* shared_env(CLI::Option* o) { return mb::core::with_env(o); }
CLI::Option* step_env(CLI::Option* o) {
  mb::core::with_env(o);
  o->envname("MESHBENCH_STEP_" + o->get_envname().substr(std::string("MESHBENCH_").size()));
  return o;
}

// The shape flags, kept so that only the ones given override the preset.
struct ModelFlags {
  std::string preset = "tiny";
  GptConfig m;
  CLI::Option *model, *layers, *hidden, *heads, *kv, *ffn, *seq, *maxseq, *vocab, *mb, *tied;
  CLI::Option *experts, *top_k, *moe_every, *capacity, *aux;  // MoE (issue 13)
};

void add_model_flags(CLI::App& app, ModelFlags& f) {
  f.model = step_env(app.add_option("--model", f.preset, "preset: " + fmt::format("{}", fmt::join(preset_names(), ", ")) +
                                            "; the shape flags below override it"));
  f.layers = step_env(app.add_option("--layers", f.m.layers, "transformer blocks L"));
  f.hidden = step_env(app.add_option("--hidden", f.m.hidden, "channels C"));
  f.heads = step_env(app.add_option("--heads", f.m.heads, "attention heads NH"));
  f.kv = step_env(app.add_option("--kv-heads", f.m.kv_heads, "key/value heads (grouped-query attention); default: heads"));
  f.ffn = step_env(app.add_option("--ffn", f.m.ffn, "MLP width F; default 4*hidden"));
  f.seq = step_env(app.add_option("--seq", f.m.seq, "sequence length T"));
  f.maxseq = step_env(app.add_option("--max-seq", f.m.max_seq,
                                      "position-table rows; default: the --model preset's table, or "
                                      "max(64, seq) when no --model is given"));
  f.vocab = step_env(app.add_option("--vocab", f.m.vocab, "vocabulary V"));
  f.mb = step_env(app.add_option("--micro-batch", f.m.micro_batch, "samples per micro-batch on one rank (b)"));
  f.tied = step_env(app.add_option("--tied", f.m.tied, "LM head tied to the token embedding (true|false)"));
  f.experts = step_env(app.add_option("--experts", f.m.experts, "MoE: experts E per MoE block, each an MLP of width --ffn (0: dense)"));
  f.top_k = step_env(app.add_option("--top-k", f.m.top_k, "MoE: experts per token k <= E (gates renormalised over the k)"));
  f.moe_every = step_env(app.add_option("--moe-every", f.m.moe_every, "MoE: blocks 0, N, 2N, ... are MoE"));
  f.capacity = step_env(app.add_option("--capacity-factor", f.m.capacity_factor,
                                  "MoE: each expert keeps its first ceil(F*tokens*k/E) assignments in token order, drops the rest (0: dropless)"));
  f.aux = step_env(app.add_option("--aux-loss-coef", f.m.aux_loss_coef, "MoE: weight of the Switch/GShard load-balancing loss (added to the loss)"));
}

void add_run_flags(CLI::App& app, Options& o) {
  step_env(app.add_option("--steps", o.steps, "timed steps"));
  step_env(app.add_option("--warmup", o.warmup, "untimed steps first"));
  step_env(app.add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"})));
  step_env(app.add_option("--dtype", o.dtype, "cuda GEMM precision: fp32 or bf16 (fp32 accumulate)")
          ->check(CLI::IsMember({"fp32", "bf16"})));
  step_env(app.add_option("--threads", o.threads, "OpenMP and OpenBLAS threads per rank; 0 (default): OMP_NUM_THREADS when set, else the rank's cores "
                          "shared among the ranks on its host (its CPU binding's cores when bound), at least 1"));
  shared_env(app.add_option("-O,--output", o.output, "HDF5 file (refuses to overwrite; see --append)"));
  shared_env(app.add_flag("--append", o.append, "add this run to an existing -O file"));
  shared_env(app.add_option("--tag", o.tag, "label stored with the run"));
  step_env(app.add_flag("--check", o.check,
                   "before timing, check one step: at one rank float32 against float64 (loss, logits, "
                   "gradients, 1e-4); on several ranks against the single-rank reference on rank 0 "
                   "(loss, every gradient, updated parameters, 1e-5); exit 1 above tolerance"));
  step_env(app.add_flag("--profile", o.profile, "time every op kind (adds timer calls) and print the table"));
  step_env(app.add_option("--export", o.export_dir,
                     "write one step (weights, tokens, logits, grads, updated weights) to DIR for "
                     "scripts/torch_reference.py, then exit"));
  step_env(app.add_option("--data", o.data, "synthetic tokens: random or repeat (a learnable period-8 pattern)")
          ->check(CLI::IsMember({"random", "repeat"})));
  step_env(app.add_option("--seed", o.seed, "seed of weights and tokens"));
  step_env(app.add_option("--lr", o.adam.lr, "AdamW learning rate"));
  step_env(app.add_option("--beta1", o.adam.beta1, "AdamW beta1"));
  step_env(app.add_option("--beta2", o.adam.beta2, "AdamW beta2"));
  step_env(app.add_option("--eps", o.adam.eps, "AdamW epsilon"));
  step_env(app.add_option("--weight-decay", o.adam.weight_decay, "AdamW weight decay (matrices only)"));
  shared_env(app.add_flag("--quiet", o.quiet, "only the summary line"));
}

void add_parallel_flags(CLI::App& app, Options& o) {
  shared_env(app.add_option("--mesh", o.mesh, "parallel degrees, e.g. dp=4, tp=2,dp=2 or cp=2,tp=2 (ep, pp come with their strategies; dp defaults to the rest of the world size)"));
  shared_env(app.add_option("--order", o.order, "mesh order, fastest-varying dimension first"));
  step_env(app.add_option("--group", o.group, "mesh group, stored with the run"));
  shared_env(app.add_option("--backend", o.backend, "communication backend: mpi (host buffers) or nccl (--device cuda)")
          ->check(CLI::IsMember({"mpi", "nccl"})));
  step_env(app.add_option("--micro-batches", o.micro_batches, "m: micro-batches per step, gradients accumulated; global batch b x m x dp"));
  step_env(app.add_option("--grad-reduce", o.grad_reduce, "avg (gradient of the global mean loss) or sum (of the replicas' mean losses)")
          ->check(CLI::IsMember({"avg", "sum"})));
  step_env(app.add_flag("--no-overlap", o.no_overlap, "reduce every gradient bucket after the backward, and post tensor parallel's input-gradient collectives only after the weight-gradient GEMM (the ablation of overlap)"));
  step_env(app.add_flag("--sp", o.sp, "sequence parallel: norms and residual on sequence shards, "
                                  "all-gather/reduce-scatter instead of all-reduce (needs tp >= 2)"));
  step_env(app.add_option("--sp-regather", o.sp_regather, "with --sp: re-gather each column-parallel "
                                    "input in the backward (true, Megatron's memory saving) or keep it (false)"));
  step_env(app.add_option("--cp-algo", o.cp_algo, "context parallel attention: ring (K/V blocks circulate), "
                                    "allgather (K/V all-gathered) or ulysses (all-to-all to head shards)")
                         ->check(CLI::IsMember({"ring", "allgather", "ulysses"})));
  step_env(app.add_option("--cp-split", o.cp_split, "context parallel sequence split: zigzag (rank r holds "
                                    "chunks r and 2C-1-r of 2C) or contiguous")
                         ->check(CLI::IsMember({"zigzag", "contiguous"})));
  step_env(app.add_option("--routing", o.routing, "MoE token-to-expert assignment: learned (the router's "
                                    "top-k) or a fixed workload from the seed: balanced, hot-expert, hot-rank, zipf:S, rotating"));
  step_env(app.add_option("--bucket-mb", o.bucket_mb, "gradient bucket size in MiB; 0: a quarter of the gradient elements, 16 Ki to 40 M"));
  step_env(app.add_option("--progress", o.progress, "who progresses MPI's non-blocking reductions: poll (tests between backward ops) or thread")
          ->check(CLI::IsMember({"poll", "thread"})));
  step_env(app.add_option("--zero", o.zero, "ZeRO stage: 0 data parallel, 1 sharded optimizer state, 2 and gradients, 3 and parameters"));
  step_env(app.add_option("--prefetch", o.prefetch, "ZeRO-3: units (embeddings, blocks, head) all-gathered ahead of the one in use"));
  CLI::Option* keep = app.add_flag("--zero3-keep-params", o.keep_params, "ZeRO-3: keep the gathered units from the first forward to the last backward of a step (the default under --mesh pp=P)");
  step_env(keep);
  step_env(app.add_flag("--zero3-regather", o.regather, "ZeRO-3 under a pipeline: gather each unit again before every micro-batch's forward and backward instead of keeping it")
               ->excludes(keep));
  step_env(app.add_option("--recompute", o.recompute,
                          "activation recomputation as Megatron defines it: none, selective (the attention core's "
                          "forward again before its backward, its probabilities or flash's log-sum-exp not kept; without cp) or full (a "
                          "block keeps only its output, and its whole forward runs again before its backward)")
               ->check(CLI::IsMember({"none", "selective", "full"})));
  step_env(app.add_option("--recompute-layers", o.recompute_layers,
                          "--recompute full: recompute only the first K blocks of each model chunk (each pipeline "
                          "stage's, each interleaved chunk's), as Megatron's --recompute-method block; 0 (the default): "
                          "every block")
               ->check(CLI::NonNegativeNumber));
  step_env(app.add_option("--attention", o.attention,
                          "flash (tiles with an online softmax, a log-sum-exp per row kept, the backward recomputing "
                          "each tile) or naive (the probabilities stored, b x heads x seq^2 per layer: the reference). "
                          "Default: flash, except on --device cuda, where a short timing of both at set-up on the run's "
                          "shape picks the faster (the run's attention_rule says which and why)")
               ->check(CLI::IsMember({"naive", "flash"})));
  step_env(app.add_option("--schedule", o.schedule, "pipeline schedule (--mesh pp=P): gpipe, 1f1b or interleaved (--vpp chunks per rank)")
          ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"})));
  step_env(app.add_option("--vpp", o.vpp, "interleaved: model chunks V per pipeline rank"));
  step_env(app.add_option("--vpp-group", o.vpp_group, "interleaved: micro-batches G per group (P <= G <= m; 0: P)"));
  step_env(app.add_option("--layers-per-stage", o.layers_per_stage,
                     "layers of each virtual stage, e.g. 3,3,2,2 (pp x vpp entries summing to --layers; default an even split)"));
}

// The run's outputs and watchdog, the test hooks, planning without a run and the step model.
void add_plan_flags(CLI::App& app, Options& o) {
  step_env(app.add_option("--trace", o.trace_file, "write a Chrome/Perfetto trace (one process per rank) to FILE.json"));
  step_env(app.add_option("--inject-fault", o.inject_fault, "corrupt one gradient element on this rank before its reduction (tests)"))
      ->group("");
  step_env(app.add_option("--inject-stall", o.inject_stall,
                          "this rank spins in its first timed step's forward without progressing: the compute "
                          "watchdog and the signal grace (tests)"))
      ->group("");
  shared_env(app.add_option("--op-timeout", o.op_timeout,
                     "seconds a communication call may stay pending before the watchdog names it, writes "
                     "FILE.hang-rank<R>.json, marks the run hung and exits 3 (0: off)"));
  shared_env(app.add_option("--time-limit", o.time_limit, "seconds; stop timing after this, status timeout, exit 3 (0: none)"));
  step_env(app.add_flag("--plan-only", o.plan_only,
                     "validate the plan for --world ranks and print it with its analytic memory per rank as "
                     "one JSON object, without MPI, communicators or a model (exit 0 valid, 2 invalid)"));
  step_env(app.add_flag("--plan-stdin", o.plan_stdin,
                     "with --plan-only: read one plan per line from stdin (flags added to the command line's) and "
                     "print one JSON object per line"));
  step_env(app.add_option("--world", o.world, "with --plan-only: the world size to plan for (default 1); "
                                    "a real run checks it against the launched ranks"));
  step_env(app.add_option("--predict", o.predict,
                          "calibration file (scripts/calibrate) or cluster description (examples/clusters/*.toml): "
                          "predict the step from the executor's action list (docs/predict.md); with --plan-only a "
                          "`predicted` object in the JSON, on a real run step/predicted in the results file and the "
                          "console beside the measurement"));
  step_env(app.add_option("--predict-fabric", o.predict_fabric,
                          "with --predict: the collective fits' fabric tag (default: the calibration's only one)"));
  step_env(app.add_option("--compute", o.compute,
                          "real (run the model) or modelled: every compute action waits the duration --predict FILE "
                          "gives it (a cluster's GPU or a calibration of this machine) while every communication runs "
                          "for real at the model's sizes; nothing of the model is allocated (docs/modelled.md)")
               ->check(CLI::IsMember({"real", "modelled"})));
  step_env(app.add_flag("--op-list", o.op_list,
                        "with --plan-only: add `op_list`, one step's compute ops of pipeline rank 0 per (op, phase, "
                        "part) with their FLOPs or elements (what scripts/calibrate --compute divides by)"));
  shared_env(app.add_option("--ranks-per-node", o.ranks_per_node, "emulate nodes of this many ranks in the topology record (0: real hosts)"));
}

GptConfig resolve_model(const ModelFlags& f, Options& o) {
  // Preset first, then every shape flag that was given (on the command line or from env).
  GptConfig c = preset(f.preset);
  o.preset = f.preset;
  if (f.layers->count()) c.layers = f.m.layers;
  if (f.hidden->count()) c.hidden = f.m.hidden;
  if (f.heads->count()) c.heads = f.m.heads;
  c.kv_heads = f.kv->count() ? f.m.kv_heads : (f.heads->count() ? c.heads : c.kv_heads);
  if (f.ffn->count()) {
    c.ffn = f.m.ffn;
  } else if (f.hidden->count()) {  // 64-bit: 4 x a large --hidden must not wrap into a valid-looking width
    const int64_t ffn = int64_t{4} * c.hidden;
    if (ffn > std::numeric_limits<int>::max())
      throw UsageError(fmt::format("--hidden {}: the default --ffn, 4 x hidden = {}, exceeds 2^31-1; give --ffn, or "
                                   "a smaller --hidden",
                                   c.hidden, ffn));
    c.ffn = static_cast<int>(ffn);
  }
  if (f.seq->count()) c.seq = f.m.seq;
  // A preset's position table is part of the model; a custom shape sizes its own to fit.
  c.max_seq = f.maxseq->count() ? f.m.max_seq : (f.model->count() ? c.max_seq : std::max(c.max_seq, c.seq));
  if (f.vocab->count()) c.vocab = f.m.vocab;
  if (f.mb->count()) c.micro_batch = f.m.micro_batch;
  if (f.tied->count()) c.tied = f.m.tied;
  if (f.experts->count()) c.experts = f.m.experts;
  if (f.top_k->count()) c.top_k = f.m.top_k;
  if (f.moe_every->count()) c.moe_every = f.m.moe_every;
  if (f.capacity->count()) c.capacity_factor = f.m.capacity_factor;
  if (f.aux->count()) c.aux_loss_coef = f.m.aux_loss_coef;
  if (c.experts == 0 && (f.top_k->count() || f.moe_every->count() || f.capacity->count() || f.aux->count()))
    throw UsageError("--top-k/--moe-every/--capacity-factor/--aux-loss-coef: MoE options need --experts E >= 1");
  validate(c);  // the sizes a rank holds are the plan's rule (validate_tensor_sizes)
  return c;
}

void check_options(Options& o) {
  if (o.steps < 1) throw UsageError(fmt::format("--steps {}: must be at least 1", o.steps));
  if (o.warmup < 0) throw UsageError(fmt::format("--warmup {}: must be >= 0", o.warmup));
  if (o.threads < 0) throw UsageError(fmt::format("--threads {}: must be >= 0", o.threads));
  mb::core::check_seconds("--op-timeout", o.op_timeout, "no watchdog");
  mb::core::check_seconds("--time-limit", o.time_limit, "no limit");
  if (o.world < 0) throw UsageError(fmt::format("--world {}: must be >= 1 (0: the launched ranks)", o.world));
  if (o.plan_stdin && !o.plan_only) throw UsageError("--plan-stdin: reads plans for --plan-only; add --plan-only");
  if (o.op_list && !o.plan_only) throw UsageError("--op-list: lists the ops of --plan-only; add --plan-only");
  if (!o.predict_fabric.empty() && o.predict.empty()) throw UsageError("--predict-fabric: selects the fits of --predict CAL; add --predict");
  if (o.compute == "modelled") {
    auto refuse = [](const char* opt, const char* why) {
      throw UsageError(fmt::format("--compute modelled with {}: {}", opt, why));
    };
    if (o.predict.empty())
      throw UsageError("--compute modelled: needs --predict FILE (a cluster description or a calibration), whose "
                       "durations the compute actions wait");
    if (o.check) refuse("--check", "nothing is computed, so there is nothing to compare with the reference");
    if (o.profile) refuse("--profile", "no op runs; the waits are the step model's (docs/modelled.md)");
    if (!o.export_dir.empty()) refuse("--export", "nothing is computed to export");
    if (o.device != "cpu" || o.backend != "mpi")
      refuse("--device/--backend", "the waits need no GPU and the buffers are host memory: run with --device cpu "
                                   "--backend mpi");
    if (o.inject_fault >= 0) refuse("--inject-fault", "there are no gradients to corrupt");
  }
  if (o.ranks_per_node < 0) throw UsageError(fmt::format("--ranks-per-node {}: must be >= 0", o.ranks_per_node));
  mb::comm::parse_order(o.order);
  mb::comm::parse_group_kind(o.group);
  if (!(o.adam.lr > 0) || !std::isfinite(o.adam.lr))
    throw UsageError(fmt::format("--lr {}: must be finite and positive", o.adam.lr));
  if (!(o.adam.beta1 >= 0 && o.adam.beta1 < 1) || !(o.adam.beta2 >= 0 && o.adam.beta2 < 1))
    throw UsageError("--beta1/--beta2: must be in [0, 1)");
  if (!(o.adam.eps > 0) || !std::isfinite(o.adam.eps))
    throw UsageError(fmt::format("--eps {}: must be finite and positive", o.adam.eps));
  if (!(o.adam.weight_decay >= 0) || !std::isfinite(o.adam.weight_decay))
    throw UsageError(fmt::format("--weight-decay {}: must be finite and >= 0", o.adam.weight_decay));
  if (o.dtype == "bf16" && o.device == "cpu")
    throw UsageError("--dtype bf16: the CPU path computes in fp32 and would label fp32 numbers bf16; bf16 runs "
                     "with --device cuda (the CPU's bf16 emulation is a test backend: tests/parallel/emulation_test)");
}

// "3,3,2,2" -> {3, 3, 2, 2}; "" -> {}.
std::vector<int> parse_int_list(const std::string& text, const char* option) {
  std::vector<int> v;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    try {
      size_t used = 0;
      v.push_back(std::stoi(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw UsageError(fmt::format("{} {}: '{}' is not an integer (a comma-separated list such as 3,3,2,2)",
                                   option, text, item));
    }
    at = end + 1;
  }
  return v;
}

}  // namespace

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  CLI::App app{"step_bench: time GPT training steps (forward, backward, AdamW) on one rank or under any "
               "parallel plan: data parallel, ZeRO-1/2/3, tensor and sequence parallel, context, pipeline and "
               "expert parallel, composed through --mesh (mpiexec -n 4 build/bin/step_bench --mesh tp=2,dp=2)",
               "step_bench"};
  // A repeated option takes its last value, so wrappers can append overrides to defaults.
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  ModelFlags f;
  add_model_flags(app, f);
  add_run_flags(app, o);
  add_parallel_flags(app, o);
  add_plan_flags(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(mb::core::note_env(mb::core::env_sources(app, argc, argv), mb::core::parse_message(app, e)));
  }
  o.env = mb::core::env_sources(app, argc, argv);
  try {
    o.model = resolve_model(f, o);
    check_options(o);
  } catch (const UsageError& e) {
    throw UsageError(mb::core::note_env(o.env, e.what()));
  }
  return o;
}

namespace {

Plan plan_of(const Options& o, int world) {
  if (o.world > 0 && o.world != world)
    throw UsageError(fmt::format("--world {}: this run has {} ranks (--world plans for another size with --plan-only)",
                                 o.world, world));
  Plan p;
  p.model = o.model;
  p.mesh_text = o.mesh;
  p.mesh = mb::comm::parse_mesh(o.mesh);
  p.order = o.order;
  p.micro_batches = o.micro_batches;
  p.grad_reduce = o.grad_reduce == "sum" ? GradReduce::kSum : GradReduce::kAvg;
  p.overlap = !o.no_overlap;
  p.bucket_mb = o.bucket_mb;
  p.progress = o.progress == "thread" ? Progress::kThread : Progress::kPoll;
  p.zero = o.zero;
  p.prefetch = o.prefetch;
  p.keep_params = o.keep_params;
  p.recompute = o.recompute;
  p.modelled_compute = o.compute == "modelled";
  p.allocates = !(o.plan_only && !o.predict.empty()) && !p.modelled_compute;
  p.recompute_layers = o.recompute_layers;
  if (o.recompute_layers > 0 && o.recompute != "full")
    throw UsageError(fmt::format("--recompute-layers {}: chooses the blocks --recompute full recomputes; add "
                                 "--recompute full (or drop --recompute-layers)", o.recompute_layers));
  {  // on --device cuda without the flag, launch() measures and may choose again
    const AttentionChoice a = choose_attention(o.attention, false, {});
    p.flash = a.flash;
    p.attention_rule = a.rule;
  }
  p.sp = o.sp;
  p.sp_regather = o.sp_regather;
  p.cp_algo = o.cp_algo == "allgather" ? CpAlgo::kAllGather : (o.cp_algo == "ulysses" ? CpAlgo::kUlysses : CpAlgo::kRing);
  p.cp_zigzag = o.cp_split == "zigzag";
  p.routing = mb::core::parse_routing(o.routing);  // names --routing and the choices
  if (p.routing.mode != mb::core::RoutingMode::kLearned && o.model.experts == 0)
    throw UsageError(fmt::format("--routing {}: a routing workload needs MoE blocks (--experts E)", o.routing));
  p.schedule = parse_pipe_schedule(o.schedule);
  p.vpp = o.vpp;
  p.vpp_group = o.vpp_group;
  p.layers_per_stage = parse_int_list(o.layers_per_stage, "--layers-per-stage");
  resolve_and_validate(p, world);  // throws UsageError before any communicator exists
  if (o.regather && (p.zero != 3 || p.degrees.pp < 2))
    throw UsageError("--zero3-regather: applies to --zero 3 under a pipeline (--mesh pp=P), which keeps the gathered "
                     "units across its micro-batches by default");
  // ZeRO-3 under a pipeline keeps a stage's gathered units across its micro-batches (as
  // torchtitan's FSDP with PP), unless --zero3-regather.
  if (p.zero == 3 && p.degrees.pp > 1 && !o.regather) p.keep_params = true;
  if (o.backend == "nccl" && o.device != "cuda")
    throw UsageError("--backend nccl: needs --device cuda (NCCL reduces device buffers)");
  if (o.backend == "nccl" && p.degrees.pp > 1 && p.schedule == PipeSchedule::kInterleaved)
    throw UsageError("--schedule interleaved with --backend nccl: NCCL pairs point-to-point calls in posting order, and "
                     "the interleaved lists post some receives after sends their peer waits behind, which deadlocks "
                     "once a message exceeds NCCL's buffers; use --schedule 1f1b or gpipe, or --backend mpi");
  if (!o.export_dir.empty() && o.zero > 0)
    throw UsageError(fmt::format("--export with --zero {}: exports the plain single-rank step (drop --zero)", o.zero));
  if (!o.export_dir.empty() && world > 1)
    throw UsageError(fmt::format("--export: exports the single-rank step; run it on one rank (world size {})", world));
  if (o.inject_fault >= 0 && p.degrees.dp * p.degrees.cp == 1 && o.zero == 0)
    throw UsageError("--inject-fault: corrupts a gradient before its data-parallel reduction; this plan has none "
                     "(needs dp x cp > 1 or --zero)");
  if (o.compute == "modelled" && p.experts_placed() && p.degrees.etp > 1)
    throw UsageError("--compute modelled with expert tensor parallel (etp > 1): the step model lists no etp calls yet");
  if (o.inject_stall >= world)
    throw UsageError(fmt::format("--inject-stall {}: no such rank (world size {})", o.inject_stall, world));
  if (o.inject_fault >= world)
    throw UsageError(fmt::format("--inject-fault {}: no such rank (world size {})", o.inject_fault, world));
  return p;
}

}  // namespace

Plan make_plan(const Options& o, int world) {
  try {
    return plan_of(o, world);
  } catch (const UsageError& e) {
    throw UsageError(mb::core::note_env(o.env, e.what()));
  }
}

}  // namespace meshbench::parallel
