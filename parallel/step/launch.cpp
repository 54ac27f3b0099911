#include "step/launch.hpp"

#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fmt/core.h>
#include <map>
#include <vector>

#include "comm/agree.hpp"
#include "comm/mesh.hpp"
#include "comm/peer_board.hpp"
#include "comm/watched_comm.hpp"
#include "compute/blas.hpp"
#include "compute/device.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "core/units.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/flops.hpp"
#include "results/hang.hpp"
#include "results/stop_signal.hpp"
#include "step/plan_memory.hpp"
#include "kernels/attention_choice.hpp"

namespace meshbench::parallel {

void install_signal_handlers(int rank) {
  results::install_stop_signals(rank, comm::host_name(), "step_bench");
  comm::open_peer_board(MPI_COMM_WORLD);  // collective: every rank calls this right after MPI_Init
}

bool signal_received() { return results::stop_signal() != 0; }

void Watchdog::start(const std::string& output, const std::string& run_id) {
  results::set_stop_site(output, run_id);  // what a signal's watcher marks when the run is stuck
  if (!active) return;
  // The dimension is the pending call's group's (results/hang.hpp: empty dim).
  const results::HangSite site{rank, comm::host_name(), "step_bench", "", timeout, output, run_id};
  watch.set_peer_state(comm::my_peer_state());  // a hang elsewhere can tell whether this rank arrived
  // Compute is watched too: a phase with no call pending that stops progressing (issue 45).
  watch.start(timeout, [site](const core::Hang& h) { results::report_hang(site, h); }, true);
}

void claim_outputs(const Options& o, results::OutputClaim& claim, int rank) {
  std::string problem;
  if (rank == 0 && !o.output.empty()) problem = claim.claim(o.output, o.append, "step_bench");
  results::agree_claim(MPI_COMM_WORLD, claim, problem);  // a full disk: exit 3, any other problem: exit 2
  if (rank == 0 && !o.trace_file.empty()) problem = results::writable_problem("--trace", o.trace_file, false);
  if (rank == 0 && problem.empty() && !o.export_dir.empty()) problem = results::writable_problem("--export", o.export_dir, true);
  comm::agree_or_throw(MPI_COMM_WORLD, problem);
}

Threads set_threads(const Options& o, const comm::Topology& topo, int rank) {
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
  compute::set_blas_threads(t.n);
  int over = t.n * ranks_here > online ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &over, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  t.oversubscribed = over != 0;
  return t;
}

void make_compute(Compute& cp, const Options& o, int local_rank) {
  cp.gpu = o.device == "cuda";
  cp.prec = o.dtype == "bf16" ? Precision::kBf16 : Precision::kFp32;
  cp.backend = &cpu_backend<float>();
  if (!cp.gpu) return;
  std::string why;
  if (!cuda::available(&why)) throw core::UsageError(fmt::format("--device cuda: no usable GPU ({})", why));
  cp.device = local_rank % compute::device_count();
  cp.gpu_backend = cuda::make_backend(cp.prec, cp.device);
  cp.gpu_name = cuda::device_name(cp.device);
  cp.backend = cp.gpu_backend.get();
}

void check_memory(const Options& o, const Plan& plan, const Compute& cp, const comm::Topology& topo, int rank,
                  const Costs* modelled) {
  const comm::RankGrid grid(plan.world, plan.mesh, plan.order);
  const auto pm = grid.membership(comm::GroupKind::kPp, rank);
  const int pp_rank = pm ? pm->index : 0;
  double need = modelled ? double(replay_buffer_bytes(plan, pp_rank, *modelled))
                         : plan_memory(plan, pp_rank).total();
  const std::string counted = modelled ? "--compute modelled's communication buffers, at the model's message sizes"
                                       : "parameters, gradients, optimizer, activations, buffers";
  if (o.check && rank == 0 && plan.world > 1) {
    const MemoryBytes ref = Gpt<float>::memory_analytic(plan.model, 4);
    need += double(ref.params + ref.grads + ref.optimizer + ref.activations + ref.buffers);
  }
  const double have = double(cp.gpu ? compute::device_memory_free() : compute::host_memory_available());
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
        problem = fmt::format("the plan needs about {:.2f} GiB on rank {} ({}{}) but its GPU has {:.2f} GiB free; shrink "
                              "the model or raise the parallel degrees (step_bench --plan-only prints the estimate)",
                              gib(needs[r]), r, counted, r == 0 && o.check ? ", and --check's reference model" : "",
                              gib(haves[r]));
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
        problem = fmt::format("the plan needs about {:.2f} GiB on host {} ({} ranks, per rank: "
                              "{}{}) but the host has {:.2f} GiB "
                              "available (MemAvailable, or its cgroup's limit); shrink the model, raise the parallel "
                              "degrees or spread the ranks over more hosts (step_bench --plan-only prints the estimate)",
                              gib(v.first), host, ranks_on[n], counted, o.check ? ", and --check's reference model on rank 0" : "",
                              gib(v.second));
      }
  }
  comm::agree_or_throw(MPI_COMM_WORLD, problem);
}

results::RunContext make_context(const Options& o, const Plan& plan, const Compute& cp, int argc, char** argv,
                                     const comm::Topology& topo) {
  results::RunContext ctx = results::make_run_context(MPI_COMM_WORLD, "step_bench", argc, argv, topo);
  ctx.attrs["tag"] = o.tag;
  ctx.attrs["backend"] = o.backend;
  ctx.attrs["order"] = plan.order;
  ctx.attrs["group"] = o.group;
  ctx.attrs["time_limit"] = o.time_limit;
  ctx.attrs["mem"] = cp.gpu ? "device" : "host";
  ctx.attrs["iters"] = o.steps;
  ctx.attrs["warmup"] = o.warmup;
  ctx.attrs["check"] = o.check;
  ctx.attrs["compute"] = o.compute;  // "modelled": no model ran (docs/modelled.md)
  const auto& d = plan.degrees;
  ctx.attrs["mesh"] = nlohmann::ordered_json{{"dp", d.dp}, {"tp", d.tp}, {"pp", d.pp}, {"cp", d.cp}, {"ep", d.ep}};
  results::sync_from_root(ctx, MPI_COMM_WORLD);
  return ctx;
}

void print_header(const core::Log& out, const Options& o, const Plan& plan, const Setup& st, const Compute& cp,
                  const comm::Topology& topo, const Threads& threads) {
  const GptConfig& c = o.model;
  const StepFlops fl = step_flops(c);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  out.out("step_bench: {} on {} ({}; {} threads per rank, OPENBLAS_CORETYPE={})\n", describe(c),
          cp.gpu ? fmt::format("{} {}", cp.gpu_name, o.dtype) : std::string("cpu"), cp.backend->name(),
          omp_get_max_threads(), coretype ? coretype : "unset");
  const auto whole = static_cast<int64_t>(Gpt<float>::full_layout(c).numel());
  if (st.model)  // both counts, named: under dp they are equal, under tp or pp the rank holds a slice
    out.out("  parameters: model {}, this rank {} ({}), FLOPs per micro-batch {:.4g} (fwd GEMM {:.4g}, bwd GEMM "
            "{:.4g}, attention fwd {:.4g} bwd {:.4g})\n",
            whole, st.model->num_params(), core::human_bytes(static_cast<double>(st.model->num_params()) * 4),
            fl.total(), fl.forward_gemm, fl.backward_gemm, fl.attention_forward, fl.attention_backward);
  else
    out.out("  parameters: model {}, this rank none allocated (modelled), FLOPs per micro-batch {:.4g}\n", whole,
            fl.total());
  if (st.replay) {
    const Cluster* cl = st.costs->cluster();
    out.out("  compute MODELLED (--compute modelled): every compute action waits its duration from {} ({}); the "
            "communication is real ({}), {} of buffers on rank 0\n",
            st.costs->source(), cl ? fmt::format("cluster {}, {}", cl->name, cl->gpu.name) : std::string("a calibration of a machine"),
            st.costs->wire_rule(), core::human_bytes(static_cast<double>(st.replay->buffer_bytes())));
  }
  if (plan.world > 1 || plan.micro_batches > 1 || plan.zero > 0)
    out.out("  plan: {}; {} ranks{}; schedule {}\n", describe(plan), plan.world,
            topo.oversubscribed ? " (OVERSUBSCRIBED: more ranks than cores, times are not meaningful)" : "",
            to_string(st.actions));
  if (st.sync) out.out("  {}\n", st.sync->describe());
  out.out("  threads per rank: {} ({}){}\n", threads.n, threads.rule,
          threads.oversubscribed ? "; OVERSUBSCRIBED: more threads than cores on a host, times are not meaningful" : "");
}

void print_peak(const core::Log& out, const Compute& cp, const Peak& peak, double datasheet) {
  out.out("  {} peak on {} ({}x{}x{}): best {:.2f} GFLOP/s, median {:.2f} over {} calls (rank 0){}\n",
          cp.gpu ? "cuBLAS GEMM" : "SGEMM", peak.shape.name, peak.shape.M, peak.shape.N, peak.shape.K,
          peak.best / 1e9, peak.median / 1e9, peak.reps,
          cp.gpu ? (std::isnan(datasheet) ? std::string("; no datasheet entry for this GPU")
                                          : fmt::format("; datasheet dense peak {:.1f} TFLOP/s", datasheet / 1e12))
                 : std::string());
}

// --device cuda without --attention: the faster of flash and naive at this run's per-rank
// attention shape; the slowest rank's times decide for every rank (issue 44, item 9).
void choose_cuda_attention(const Options& o, Plan& plan, const Compute& cp) {
  if (!cp.gpu || !o.attention.empty() || plan.degrees.cp > 1) return;  // context parallel runs its own chunk attention
  const GptConfig& c = plan.model;
  const int tp = std::max(1, plan.degrees.tp);
  AttentionTimes t = time_attention(*cp.backend, c.micro_batch, c.seq, std::max(1, c.heads / tp),
                                    std::max(1, c.kv_heads / tp), c.head_size());
  double s[2] = {std::isfinite(t.flash_s) ? t.flash_s : HUGE_VAL, std::isfinite(t.naive_s) ? t.naive_s : HUGE_VAL};
  MB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, s, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "world");
  t = {std::isfinite(s[0]) ? s[0] : NAN, std::isfinite(s[1]) ? s[1] : NAN};
  const AttentionChoice a = choose_attention("", true, t);
  plan.flash = a.flash;
  plan.attention_rule = a.rule;
}

void launch(Launched& l, const Options& o, Plan& plan, int rank, Watchdog& wd, std::unique_ptr<Costs> costs) {
  const double t0 = core::now_seconds();
  {
    comm::WatchScope scope(wd.active, "set-up (topology, groups, model; collective)", 0, "world");
    l.topo = comm::discover_topology(MPI_COMM_WORLD, o.device);
    // The GPU from the real host's local rank: --ranks-per-node renumbers local ranks to
    // emulate nodes, and two ranks of one host must not share a GPU (NCCL refuses duplicates).
    const int gpu_local_rank = l.topo.ranks[static_cast<size_t>(rank)].local_rank;
    if (o.ranks_per_node > 0) comm::emulate_nodes(l.topo, o.ranks_per_node);
    l.threads = set_threads(o, l.topo, rank);
    if (l.threads.oversubscribed) l.topo.oversubscribed = true;  // the run's `oversubscribed` covers threads too
    make_compute(l.cp, o, gpu_local_rank);
    if (!costs) choose_cuda_attention(o, plan, l.cp);
    check_memory(o, plan, l.cp, l.topo, rank, costs.get());
    l.st.watch = wd.active;
    if (costs)
      make_modelled_setup(l.st, o, plan, rank, std::move(costs));
    else
      make_setup(l.st, o, plan, rank, *l.cp.backend, l.cp.device);
  }
  l.setup_s[0] = core::now_seconds() - t0;
  l.setup_s[1] = l.st.comm_setup_s;
  MPI_Allreduce(MPI_IN_PLACE, l.setup_s, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

double align_clocks(const comm::Topology& topo, StepReporters* reps, comm::ClockOffset& clock) {
  // On one host every rank reads the same monotonic clock: the offset is exactly 0 (the
  // ping-pong estimate's error grows to milliseconds when the cores are oversubscribed).
  const bool one_host = std::all_of(topo.ranks.begin(), topo.ranks.end(),
                                    [&](const auto& p) { return p.host == topo.ranks.front().host; });
  clock = comm::estimate_clock_offset(MPI_COMM_WORLD, 20);
  if (one_host) clock = {};
  if (reps) reps->add_step_attrs({{"clock_shared_host", one_host}});
  double t_origin = core::now_seconds() - clock.offset_s;
  MPI_Bcast(&t_origin, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return t_origin;
}

}  // namespace meshbench::parallel
