// step_bench: one transformer training step (GPT forward, backward, AdamW) timed on one rank.
// Prints model size, FLOPs per step from exact op shapes (flops.hpp), step time (median),
// tokens/s, FLOP/s, MFU against this machine's SGEMM peak measured at start-up on the
// model's largest GEMM shape (and, on a GPU, the datasheet peak by device name), per-phase
// times and memory by category; writes /runs/<id>/step/ to -O FILE.h5 and FILE.jsonl.
// An MPI program even at one rank: the parallel strategies of later issues run it on many.
// Not here: the layers (layers.cpp), the model wiring (model.cpp), HDF5 layout (step_h5.cpp).
#include <mpi.h>
#include <omp.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "comm/mesh.hpp"
#include "comm/topology.hpp"
#include "compute/blas.hpp"
#include "config.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stats.hpp"
#include "core/timer.hpp"
#include "cuda/cuda_engine.hpp"
#include "export.hpp"
#include "flops.hpp"
#include "model.hpp"
#include "results/run_context.hpp"
#include "step_h5.hpp"

namespace mb = meshbench;
using mb::core::UsageError;
using namespace mb::parallel;

namespace {

struct Options {
  GptConfig model;
  std::string preset = "tiny";
  int steps = 10, warmup = 2, threads = 0;
  std::string device = "cpu", dtype = "fp32", output, tag, export_dir, data = "random";
  // Flags every meshbench binary shares (DESIGN.md); at one rank only their defaults run.
  std::string mesh, order = std::string(mb::comm::kDefaultOrder), group = "world", backend = "mpi";
  double time_limit = 0;
  int ranks_per_node = 0;
  bool append = false, check = false, profile = false, quiet = false;
  uint64_t seed = 1234;
  AdamWConfig adam;
};

// Parses argv; nullopt after --help. Throws UsageError for anything wrong.
std::optional<Options> parse(int argc, char** argv) {
  Options o;
  CLI::App app{"step_bench: time GPT training steps (forward, backward, AdamW) on one rank",
               "step_bench"};
  // A repeated option takes its last value, so wrappers can append overrides to defaults.
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string preset_name = o.preset;
  GptConfig m;
  auto* o_model = mb::core::with_env(app.add_option("--model", preset_name, "preset: " + fmt::format("{}", fmt::join(preset_names(), ", ")) +
                                            "; the shape flags below override it"));
  auto* o_layers = mb::core::with_env(app.add_option("--layers", m.layers, "transformer blocks L"));
  auto* o_hidden = mb::core::with_env(app.add_option("--hidden", m.hidden, "channels C"));
  auto* o_heads = mb::core::with_env(app.add_option("--heads", m.heads, "attention heads NH"));
  auto* o_kv = mb::core::with_env(app.add_option("--kv-heads", m.kv_heads, "key/value heads (grouped-query attention); default: heads"));
  auto* o_ffn = mb::core::with_env(app.add_option("--ffn", m.ffn, "MLP width F; default 4*hidden"));
  auto* o_seq = mb::core::with_env(app.add_option("--seq", m.seq, "sequence length T"));
  auto* o_maxseq = mb::core::with_env(app.add_option("--max-seq", m.max_seq,
                                      "position-table rows; default: the --model preset's table, or "
                                      "max(64, seq) when no --model is given"));
  auto* o_vocab = mb::core::with_env(app.add_option("--vocab", m.vocab, "vocabulary V"));
  auto* o_mb = mb::core::with_env(app.add_option("--micro-batch", m.micro_batch, "samples per step B"));
  auto* o_tied = mb::core::with_env(app.add_option("--tied", m.tied, "LM head tied to the token embedding (true|false)"));
  mb::core::with_env(app.add_option("--steps", o.steps, "timed steps"));
  mb::core::with_env(app.add_option("--warmup", o.warmup, "untimed steps first"));
  mb::core::with_env(app.add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"})));
  mb::core::with_env(app.add_option("--dtype", o.dtype, "cuda GEMM precision: fp32 or bf16 (fp32 accumulate)")
          ->check(CLI::IsMember({"fp32", "bf16"})));
  mb::core::with_env(app.add_option("--threads", o.threads, "OpenMP and OpenBLAS threads; 0: OMP_NUM_THREADS or all cores"));
  mb::core::with_env(app.add_option("-O,--output", o.output, "HDF5 file (refuses to overwrite; see --append)"));
  mb::core::with_env(app.add_flag("--append", o.append, "add this run to an existing -O file"));
  mb::core::with_env(app.add_option("--tag", o.tag, "label stored with the run"));
  mb::core::with_env(app.add_flag("--check", o.check,
                   "before timing, compare one float32 step with a float64 run of the same step "
                   "(loss, logits, gradients; exit 1 above tolerance)"));
  mb::core::with_env(app.add_flag("--profile", o.profile, "time every op kind (adds timer calls) and print the table"));
  mb::core::with_env(app.add_option("--export", o.export_dir,
                     "write one step (weights, tokens, logits, grads, updated weights) to DIR for "
                     "scripts/torch_reference.py, then exit"));
  mb::core::with_env(app.add_option("--data", o.data, "synthetic tokens: random or repeat (a learnable period-8 pattern)")
          ->check(CLI::IsMember({"random", "repeat"})));
  mb::core::with_env(app.add_option("--seed", o.seed, "seed of weights and tokens"));
  mb::core::with_env(app.add_option("--lr", o.adam.lr, "AdamW learning rate"));
  mb::core::with_env(app.add_option("--beta1", o.adam.beta1, "AdamW beta1"));
  mb::core::with_env(app.add_option("--beta2", o.adam.beta2, "AdamW beta2"));
  mb::core::with_env(app.add_option("--eps", o.adam.eps, "AdamW epsilon"));
  mb::core::with_env(app.add_option("--weight-decay", o.adam.weight_decay, "AdamW weight decay (matrices only)"));
  mb::core::with_env(app.add_flag("--quiet", o.quiet, "only the summary line"));
  mb::core::with_env(app.add_option("--mesh", o.mesh, "parallel degrees (tp=1,pp=1,...); this version runs one rank, so every degree must be 1"));
  mb::core::with_env(app.add_option("--order", o.order, "mesh order, stored with the run"));
  mb::core::with_env(app.add_option("--group", o.group, "mesh group, stored with the run (world at one rank)"));
  mb::core::with_env(app.add_option("--backend", o.backend, "communication backend, stored (no communication at one rank)")
          ->check(CLI::IsMember({"mpi", "nccl"})));
  mb::core::with_env(app.add_option("--time-limit", o.time_limit, "seconds; stop timing after this, status timeout, exit 3 (0: none)"));
  mb::core::with_env(app.add_option("--ranks-per-node", o.ranks_per_node, "emulate nodes of this many ranks in the topology record (0: real hosts)"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  // Preset first, then every shape flag that was given (on the command line or from env).
  GptConfig c = preset(preset_name);
  o.preset = preset_name;
  if (o_layers->count()) c.layers = m.layers;
  if (o_hidden->count()) c.hidden = m.hidden;
  if (o_heads->count()) c.heads = m.heads;
  c.kv_heads = o_kv->count() ? m.kv_heads : (o_heads->count() ? c.heads : c.kv_heads);
  c.ffn = o_ffn->count() ? m.ffn : (o_hidden->count() ? 4 * c.hidden : c.ffn);
  if (o_seq->count()) c.seq = m.seq;
  // A preset's position table is part of the model; a custom shape sizes its own to fit.
  c.max_seq = o_maxseq->count() ? m.max_seq : (o_model->count() ? c.max_seq : std::max(c.max_seq, c.seq));
  if (o_vocab->count()) c.vocab = m.vocab;
  if (o_mb->count()) c.micro_batch = m.micro_batch;
  if (o_tied->count()) c.tied = m.tied;
  validate(c);
  o.model = c;
  if (o.steps < 1) throw UsageError(fmt::format("--steps {}: must be at least 1", o.steps));
  if (o.warmup < 0) throw UsageError(fmt::format("--warmup {}: must be >= 0", o.warmup));
  if (o.threads < 0) throw UsageError(fmt::format("--threads {}: must be >= 0", o.threads));
  if (o.time_limit < 0) throw UsageError(fmt::format("--time-limit {}: must be >= 0", o.time_limit));
  if (o.ranks_per_node < 0) throw UsageError(fmt::format("--ranks-per-node {}: must be >= 0", o.ranks_per_node));
  {
    const mb::comm::MeshSpec ms = mb::comm::parse_mesh(o.mesh);  // throws UsageError
    for (int d : {ms.tp, ms.cp, ms.ep, ms.dp, ms.pp, ms.etp, ms.edp})
      if (d > 1)
        throw UsageError(fmt::format("--mesh {}: step_bench runs the single-rank engine in this version; every "
                                     "degree must be 1 (the parallel strategies come with their own issues)",
                                     o.mesh));
    mb::comm::parse_order(o.order);
    mb::comm::parse_group_kind(o.group);
  }
  if (!(o.adam.lr > 0)) throw UsageError("--lr: must be positive");
  if (!(o.adam.beta1 >= 0 && o.adam.beta1 < 1) || !(o.adam.beta2 >= 0 && o.adam.beta2 < 1))
    throw UsageError("--beta1/--beta2: must be in [0, 1)");
  if (!(o.adam.eps > 0)) throw UsageError("--eps: must be positive");
  if (!o.output.empty() && !o.append && std::filesystem::exists(o.output))
    throw UsageError(fmt::format("-O {}: file exists (meshbench never overwrites; use --append "
                                 "or another name)", o.output));
  if (!o.output.empty() && o.append && !std::filesystem::exists(o.output))
    throw UsageError(fmt::format("--append: -O {} does not exist", o.output));
  if (!o.output.empty()) {  // as the collective binaries do: make the folder
    std::filesystem::path parent = std::filesystem::path(o.output).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (!parent.empty() && !std::filesystem::is_directory(parent))
      throw UsageError(fmt::format("-O {}: cannot create folder {}", o.output, parent.string()));
  }
  return o;
}

struct Peak {
  GemmShape shape;
  double best = 0, median = 0;  // FLOP/s
  int reps = 0;
};

// SGEMM FLOP/s on the model's largest forward GEMM (A (M,K) @ B (N,K)^T, as the engine calls
// it), repeated for at least `min_seconds` and 3 calls after one warm-up call.
Peak measure_sgemm_peak(const GptConfig& c, double min_seconds) {
  Peak pk;
  pk.shape = largest_gemm(c);
  const auto& s = pk.shape;
  std::vector<float> A(static_cast<size_t>(s.M) * s.K, 0.01f), B(static_cast<size_t>(s.N) * s.K, 0.02f),
      C(static_cast<size_t>(s.M) * s.N, 0.f);
  auto call = [&] {
    mb::compute::gemm<float>(mb::compute::Trans::kNo, mb::compute::Trans::kYes, s.M, s.N, s.K, 1.f,
                             A.data(), s.K, B.data(), s.K, 0.f, C.data(), s.N);
  };
  call();
  std::vector<double> rates;
  const double flops = 2.0 * s.M * s.N * s.K, t_start = mb::core::now_seconds();
  while (rates.size() < 3 || mb::core::now_seconds() - t_start < min_seconds) {
    const double t0 = mb::core::now_seconds();
    call();
    rates.push_back(flops / (mb::core::now_seconds() - t0));
    if (rates.size() >= 200) break;
  }
  pk.best = *std::max_element(rates.begin(), rates.end());
  pk.median = mb::core::median(rates);
  pk.reps = static_cast<int>(rates.size());
  return pk;
}

double rel_err(const double* a, const double* ref, int64_t n, double* max_abs) {
  double num = 0, den = 0, mx = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = a[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    mx = std::max(mx, std::abs(d));
  }
  if (max_abs) *max_abs = mx;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// --check: one float32 step against the float64 instantiation on the same weights and tokens.
std::vector<CheckRow> check_against_fp64(Gpt<float>& m32, const int32_t* tok, const int32_t* tgt) {
  const GptConfig& c = m32.config();
  Gpt<double> m64(c);
  const int64_t P = m32.layout().total(), NV = c.tokens() * c.vocab;
  for (int64_t i = 0; i < P; ++i) m64.params()[i] = m32.params()[i];
  std::vector<float> logits32(static_cast<size_t>(NV));
  std::vector<double> logits64(static_cast<size_t>(NV));
  m32.zero_grad();
  const double loss32 = m32.forward(tok, tgt, logits32.data());
  m32.backward();
  m64.zero_grad();
  const double loss64 = m64.forward(tok, tgt, logits64.data());
  m64.backward();
  std::vector<double> l32(logits32.begin(), logits32.end()), g32(m32.grads(), m32.grads() + P);
  constexpr double kTol = 1e-4;  // float32 against float64, normalised L2 error
  std::vector<CheckRow> rows;
  auto add = [&](std::string q, const double* a, const double* ref, int64_t n) {
    CheckRow r{std::move(q), 0, 0, kTol, false};
    r.rel = rel_err(a, ref, n, &r.max_abs);
    r.pass = r.rel <= kTol;
    rows.push_back(r);
  };
  add("loss", &loss32, &loss64, 1);
  add("logits", l32.data(), logits64.data(), NV);
  add("grads", g32.data(), m64.grads(), P);
  for (const auto& e : m32.layout().entries())
    add("grad:" + e.name, g32.data() + e.offset, m64.grads() + e.offset, e.numel);
  m32.zero_grad();
  return rows;
}

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

int run(int argc, char** argv, int world_rank, int world_size) {
  mb::core::Log log(world_rank, false);
  std::optional<Options> parsed = parse(argc, argv);
  if (!parsed) return 0;
  Options o = *parsed;
  const mb::core::Log out(world_rank, o.quiet);
  if (world_size != 1)
    throw UsageError(fmt::format("step_bench runs on one rank in this version (world size {}); "
                                 "the parallel strategies come with their own issues",
                                 world_size));
  const GptConfig& c = o.model;
  if (o.threads > 0) {
    omp_set_num_threads(o.threads);
    mb::compute::set_blas_threads(o.threads);
  } else {
    mb::compute::set_blas_threads(omp_get_max_threads());
  }
  const int threads = omp_get_max_threads();
  const DataKind data = o.data == "repeat" ? DataKind::kRepeat : DataKind::kRandom;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");

  if (o.device == "cuda") {
    std::string why;
    if (!cuda::available(&why))
      throw UsageError(fmt::format("--device cuda: no usable GPU ({})", why));
  }

  Gpt<float> model(c);
  model.init_weights(o.seed);
  std::vector<int32_t> tok(static_cast<size_t>(c.tokens())), tgt(tok.size());

  if (!o.export_dir.empty()) {
    synthetic_batch(tok.data(), tgt.data(), data, o.seed, 0, 0, c.micro_batch, c.seq, c.vocab);
    ExportedStep s = run_export_step(model, tok.data(), tgt.data(), o.adam);
    write_export(o.export_dir, model, s, o.adam);
    out.always("step_bench: exported one step of {} (loss {:.6f}) to {}\n", describe(c), s.loss,
               o.export_dir);
    return 0;
  }

  const StepFlops fl = step_flops(c);
  const double flops = fl.total();
  out.out("step_bench: {} on {} ({} threads, OPENBLAS_CORETYPE={})\n", describe(c), o.device,
          threads, coretype ? coretype : "unset");
  out.out("  parameters {} ({}), FLOPs/step {:.4g} (fwd GEMM {:.4g}, bwd GEMM {:.4g}, attention fwd {:.4g} bwd {:.4g})\n",
          model.num_params(), human_bytes(static_cast<double>(model.num_params()) * 4), flops,
          fl.forward_gemm, fl.backward_gemm, fl.attention_forward, fl.attention_backward);

  const bool gpu = o.device == "cuda";
  const cuda::Precision prec = o.dtype == "bf16" ? cuda::Precision::kBf16 : cuda::Precision::kFp32;
  Peak peak;
  double datasheet = NAN;
  std::string gpu_name = "none";
  if (gpu) {
    gpu_name = cuda::device_name();
    peak.shape = largest_gemm(c);
    peak.best = peak.median = cuda::measure_gemm_peak(peak.shape.M, peak.shape.N, peak.shape.K, prec);
    peak.reps = 3;
    datasheet = cuda::datasheet_peak(gpu_name, prec);
    out.out("  GPU {}: datasheet dense {} peak {}\n", gpu_name, o.dtype,
            std::isnan(datasheet) ? std::string("unknown (not in the table: no datasheet MFU)")
                                  : fmt::format("{:.1f} TFLOP/s", datasheet / 1e12));
  } else {
    peak = measure_sgemm_peak(c, 0.5);
  }
  out.out("  {} peak on {} ({}x{}x{}): best {:.2f} GFLOP/s, median {:.2f} over {} calls\n",
          gpu ? (o.dtype == "bf16" ? "cuBLAS bf16 GEMM" : "cuBLAS SGEMM") : "SGEMM", peak.shape.name,
          peak.shape.M, peak.shape.N, peak.shape.K, peak.best / 1e9,
          peak.median / 1e9, peak.reps);

  std::vector<CheckRow> check_rows;
  std::string check = "off";
  if (o.check && gpu) {
    // On a GPU the reference is the CPU float32 path: one whole step, normalised errors.
    for (const auto& r : cuda::step_parity(c, prec, static_cast<unsigned>(o.seed)))
      check_rows.push_back({"cuda_vs_cpu:" + r.op, NAN, r.rel_err, r.tolerance, r.rel_err <= r.tolerance});
    bool ok = true;
    for (const auto& r : check_rows) ok = ok && r.pass;
    check = ok ? "pass" : "fail";
    for (const auto& r : check_rows)
      out.out("  check {:<32} rel {:.3e} tol {:.0e} {}\n", r.quantity, r.rel, r.tolerance, r.pass ? "ok" : "FAIL");
  } else if (o.check) {
    synthetic_batch(tok.data(), tgt.data(), data, o.seed, 0, 0, c.micro_batch, c.seq, c.vocab);
    check_rows = check_against_fp64(model, tok.data(), tgt.data());
    bool ok = true;
    for (const auto& r : check_rows) ok = ok && r.pass;
    check = ok ? "pass" : "fail";
    for (const auto& r : check_rows)
      if (!r.pass || r.quantity.rfind("grad:", 0) != 0)
        out.out("  check {:<32} rel {:.3e} max_abs {:.3e} tol {:.0e} {}\n", r.quantity, r.rel,
                r.max_abs, r.tolerance, r.pass ? "ok" : "FAIL");
  }

  // The run context and the file are created before timing, so a killed run leaves the
  // finished steps readable.
  mb::comm::Topology topo = mb::comm::discover_topology(MPI_COMM_WORLD, o.device);
  if (o.ranks_per_node > 0) mb::comm::emulate_nodes(topo, o.ranks_per_node);
  mb::results::RunContext ctx = mb::results::make_run_context(MPI_COMM_WORLD, "step_bench", argc, argv, topo);
  ctx.attrs["tag"] = o.tag;
  ctx.attrs["backend"] = o.backend;
  ctx.attrs["order"] = o.order;
  ctx.attrs["group"] = o.group;
  ctx.attrs["time_limit"] = o.time_limit;
  ctx.attrs["mem"] = o.device == "cuda" ? "device" : "host";
  ctx.attrs["iters"] = o.steps;
  ctx.attrs["warmup"] = o.warmup;
  ctx.attrs["check"] = o.check;
  ctx.attrs["mesh"] = nlohmann::ordered_json{{"dp", 1}, {"tp", 1}, {"pp", 1}, {"cp", 1}, {"ep", 1}};
  mb::results::sync_from_root(ctx, MPI_COMM_WORLD);
  const std::vector<std::string> phase_names{"forward", "backward", "optimizer"};
  nlohmann::ordered_json sattrs{
      {"preset", o.preset}, {"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
      {"kv_heads", c.kv_heads}, {"ffn", c.ffn}, {"seq", c.seq}, {"max_seq", c.max_seq},
      {"vocab", c.vocab}, {"micro_batch", c.micro_batch}, {"tied", c.tied},
      {"parameters", model.num_params()}, {"device", o.device}, {"dtype", o.dtype},
      {"threads", threads}, {"openblas_coretype", coretype ? coretype : ""},
      {"data", o.data}, {"seed", o.seed}, {"lr", o.adam.lr}, {"beta1", o.adam.beta1},
      {"beta2", o.adam.beta2}, {"eps", o.adam.eps}, {"weight_decay", o.adam.weight_decay},
      {"strategy", "single"}, {"degrees", nlohmann::ordered_json{{"dp", 1}, {"tp", 1}, {"pp", 1}}},
      {"zero_stage", 0}, {"schedule", "none"}, {"microbatches", 1},
      {"flops_per_step", flops}, {"flops_forward_gemm", fl.forward_gemm},
      {"flops_backward_gemm", fl.backward_gemm}, {"flops_attention_forward", fl.attention_forward},
      {"flops_attention_backward", fl.attention_backward},
      {"flops_formula", "2*M*N*K per GEMM; fwd linears x3 (fwd, dinput, dweight); attention "
                        "QK^T,PV fwd + 4 bwd products in causal 64-row blocks"},
      {"peak_measured_flops", peak.best}, {"peak_measured_median_flops", peak.median},
      {"peak_rule", "best sgemm rate on the largest GEMM shape, measured before and after the timed steps; the higher is used"},
      {"peak_gemm", fmt::format("{} {}x{}x{} sgemm", peak.shape.name, peak.shape.M, peak.shape.N, peak.shape.K)},
      {"peak_datasheet_flops", datasheet},
      {"peak_datasheet_source", gpu ? "NVIDIA datasheet dense peak by device name: " + gpu_name : "none (cpu)"},
      {"gpu", gpu_name}};
  std::unique_ptr<StepH5> h5;
  if (!o.output.empty()) {
    h5 = std::make_unique<StepH5>(o.output, o.append, MPI_COMM_WORLD, ctx, sattrs, phase_names);
  }

  std::vector<double> t_step, t_fwd, t_bwd, t_opt, losses;
  std::vector<OpEvent> events;  // --profile: every op call of the timed steps
  const double t_origin = mb::core::now_seconds();
  model.set_profiling(o.profile);
  if (gpu) {
    const cuda::GpuStepTimes g = cuda::run_steps(c, prec, o.warmup, o.steps, static_cast<unsigned>(o.seed));
    t_step = g.step;
    t_fwd = g.forward;
    t_bwd = g.backward;
    t_opt = g.optimizer;
    losses = g.loss;
    if (h5)
      for (size_t i = 0; i < t_step.size(); ++i) {
        const double ph[3] = {t_fwd[i], t_bwd[i], t_opt[i]};
        h5->append_step(t_step[i], ph, losses[i]);
      }
  }
  bool timed_out = false;
  for (int s = 0; s < (gpu ? 0 : o.warmup + o.steps); ++s) {
    if (o.time_limit > 0 && mb::core::now_seconds() - t_origin > o.time_limit) {
      timed_out = true;
      out.warn("step_bench: --time-limit {} s reached after {} of {} steps\n", o.time_limit, s,
               o.warmup + o.steps);
      break;
    }
    if (s == o.warmup) model.reset_profile();  // the op profile covers timed steps only
    model.set_trace(s >= o.warmup ? &events : nullptr, s - o.warmup);
    synthetic_batch(tok.data(), tgt.data(), data, o.seed, s, 0, c.micro_batch, c.seq, c.vocab);
    const double t0 = mb::core::now_seconds();
    model.zero_grad();
    const float loss = model.forward(tok.data(), tgt.data());
    const double t1 = mb::core::now_seconds();
    model.backward();
    const double t2 = mb::core::now_seconds();
    model.update(o.adam, s + 1);
    const double t3 = mb::core::now_seconds();
    if (!std::isfinite(loss)) {
      out.warn("step_bench: loss is {} at step {}\n", loss, s);
    }
    if (s < o.warmup) continue;
    t_step.push_back(t3 - t0);
    t_fwd.push_back(t1 - t0);
    t_bwd.push_back(t2 - t1);
    t_opt.push_back(t3 - t2);
    losses.push_back(loss);
    if (h5) {
      const double ph[3] = {t1 - t0, t2 - t1, t3 - t2};
      h5->append_step(t3 - t0, ph, loss);
    }
  }

  // On a shared machine the GEMM rate drifts while the steps run: measure the peak again
  // after them and normalise by the higher of the two (the lower, conservative MFU).
  if (!gpu) {
    const Peak after = measure_sgemm_peak(c, 0.5);
    out.out("  SGEMM peak again after the steps: best {:.2f} GFLOP/s (before {:.2f}); MFU uses the higher\n",
            after.best / 1e9, peak.best / 1e9);
    if (h5)
      h5->write_step_attrs({{"peak_measured_flops_before", peak.best},
                            {"peak_measured_flops_after", after.best},
                            {"peak_measured_flops", std::max(peak.best, after.best)}});
    peak.best = std::max(peak.best, after.best);
  }

  StepSummary sum{};
  sum.step_time_median = mb::core::median(t_step);
  sum.step_time_min = mb::core::min_of(t_step);
  sum.step_time_p99 = mb::core::percentile(t_step, 99);
  sum.tokens_per_s = static_cast<double>(c.tokens()) / sum.step_time_median;
  sum.flops_per_step = flops;
  sum.model_flops_per_s = flops / sum.step_time_median;
  sum.peak_measured_flops = peak.best;
  sum.mfu_measured_peak = sum.model_flops_per_s / peak.best;
  sum.peak_datasheet_flops = datasheet;
  sum.mfu_datasheet = sum.model_flops_per_s / datasheet;  // NaN without a datasheet entry
  sum.bubble_measured = 0;
  sum.bubble_theory = 0;
  sum.exposed_comm_fraction = 0;
  sum.loss_first = losses.empty() ? NAN : losses.front();
  sum.loss_last = losses.empty() ? NAN : losses.back();
  sum.straggler_rank = 0;
  sum.check = check;

  const MemoryBytes mm = model.memory_allocated();
  const MemoryBytes ma = Gpt<float>::memory_analytic(c, 4);
  const std::vector<MemoryRow> mem{
      {"params", double(mm.params), double(ma.params)},
      {"grads", double(mm.grads), double(ma.grads)},
      {"optimizer", double(mm.optimizer), double(ma.optimizer)},
      {"activations", double(mm.activations), double(ma.activations)},
      {"buffers", double(mm.buffers), double(ma.buffers)},
      {"process_peak_rss", peak_rss_bytes(), NAN},
  };

  out.out("  step time median {:.3f} ms (min {:.3f}, p99 {:.3f}) over {} steps after {} warm-up\n",
          sum.step_time_median * 1e3, sum.step_time_min * 1e3, sum.step_time_p99 * 1e3, o.steps,
          o.warmup);
  out.out("  phases (median): forward {:.3f} ms, backward {:.3f} ms, optimizer {:.3f} ms\n",
          mb::core::median(t_fwd) * 1e3, mb::core::median(t_bwd) * 1e3,
          mb::core::median(t_opt) * 1e3);
  out.out("  tokens/s {:.1f}, {:.2f} GFLOP/s, MFU {:.1f}% of measured GEMM peak {:.2f} GFLOP/s; datasheet MFU {}\n",
          sum.tokens_per_s, sum.model_flops_per_s / 1e9, 100 * sum.mfu_measured_peak,
          peak.best / 1e9,
          std::isnan(sum.mfu_datasheet) ? std::string(gpu ? "n/a (device not in the table)" : "n/a on cpu")
                                        : fmt::format("{:.1f}%", 100 * sum.mfu_datasheet));
  out.out("  loss {:.4f} -> {:.4f}\n", sum.loss_first, sum.loss_last);
  out.out("  memory            measured     analytic\n");
  for (const auto& r : mem)
    out.out("    {:<16} {:>12} {:>12}\n", r.category, human_bytes(r.measured_bytes),
            std::isnan(r.analytic_bytes) ? std::string("-") : human_bytes(r.analytic_bytes));
  std::vector<std::pair<std::string, double>> ops;
  if (o.profile) {
    out.out("  op profile (per step, over timed steps):\n");
    for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
      const double per = model.op_seconds()[i] / o.steps;
      ops.emplace_back(op_name(static_cast<Op>(i)), per);
      out.out("    {:<14} {:9.3f} ms  {:5.1f}%\n", op_name(static_cast<Op>(i)), per * 1e3,
              100 * per / sum.step_time_median);
    }
  }
  if (h5) {
    h5->write_memory(mem);
    h5->write_check(check_rows);
    h5->write_summary(sum);
    if (o.profile) h5->write_op_profile(ops);
    h5->write_events(events, t_origin);
    h5->finish(timed_out ? "timeout" : (check == "fail" ? "failed" : "ok"));
    if (world_rank == 0) {
      std::ofstream js(std::filesystem::path(o.output).replace_extension(".jsonl"), std::ios::app);
      for (size_t i = 0; i < t_step.size(); ++i)
        js << nlohmann::ordered_json{{"run_id", h5->run_id()}, {"binary", "step_bench"}, {"tag", o.tag},
                                     {"step", i}, {"step_time", t_step[i]}, {"forward", t_fwd[i]},
                                     {"backward", t_bwd[i]}, {"optimizer", t_opt[i]}, {"loss", losses[i]}}
                  .dump()
           << "\n";
      js << nlohmann::ordered_json{{"run_id", h5->run_id()}, {"binary", "step_bench"}, {"tag", o.tag},
                                   {"summary", true}, {"model", describe(c)}, {"threads", threads},
                                   {"step_time_median", sum.step_time_median}, {"tokens_per_s", sum.tokens_per_s},
                                   {"flops_per_step", flops}, {"model_flops_per_s", sum.model_flops_per_s},
                                   {"peak_measured_flops", peak.best}, {"mfu_measured_peak", sum.mfu_measured_peak},
                                   {"check", check}}
                .dump()
         << "\n";
    }
    out.always("step_bench: wrote run {} to {}\n", h5->run_id(), o.output);
  }
  out.always("step_bench: median {:.3f} ms/step, {:.0f} tokens/s, {:.2f} GFLOP/s, MFU {:.1f}% (measured SGEMM peak), check {}\n",
             sum.step_time_median * 1e3, sum.tokens_per_s, sum.model_flops_per_s / 1e9,
             100 * sum.mfu_measured_peak, check);
  if (timed_out) return 3;  // DESIGN.md: a timeout is a runtime fault; the file says how far it got
  return check == "fail" ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  mb::core::set_fault_identity(rank, mb::comm::host_name());
  int rc = 0;
  try {
    rc = run(argc, argv, rank, size);
  } catch (const UsageError& e) {
    if (rank == 0) std::fprintf(stderr, "step_bench: error: %s\n", e.what());
    rc = 2;
  } catch (const mb::core::RuntimeFault& e) {
    std::fprintf(stderr, "step_bench: rank %d: %s\n", rank, e.what());
    rc = 3;
  }
  MPI_Finalize();
  return rc;
}
