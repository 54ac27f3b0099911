#include "options.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/units.hpp"

namespace meshbench::collectives {
namespace {

using core::UsageError;

std::uint64_t size_arg(const std::string& flag, const std::string& text) {
  auto v = core::parse_size(text);
  if (!v) throw UsageError(fmt::format("{}: '{}' is not a size (a byte count with an optional K, M or G suffix, e.g. 8, 64K, 128M)", flag, text));
  return *v;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

const char* name(Timing t) {
  switch (t) {
    case Timing::kPipelined: return "pipelined";
    case Timing::kWindow: return "window";
    case Timing::kStream: return "stream";
    case Timing::kGraph: return "graph";
    case Timing::kIsolated: break;
  }
  return "isolated";
}
const char* name(InplaceMode m) {
  return m == InplaceMode::kYes ? "yes" : m == InplaceMode::kNo ? "no" : "both";
}

namespace {

// The options typed as text, parsed and checked once CLI11 has read them.
struct TextFlags {
  std::string min_b = "8", max_b = "128M", sizes, dtype = "float", op = "sum", backend = "mpi", mem, inplace = "both",
              timing = "auto", warmup = "auto", rank_stat = "max", routing = "balanced";
};

// Adds one option that also reads MESHBENCH_<OPTION> from the environment.
template <typename T>
CLI::Option* add(CLI::App& app, const std::string& flags, T& var, const std::string& help) {
  return core::with_env(app.add_option(flags, var, help));
}

// The sweep and timing flags (nccl-tests' -b -e -f -n -w -c and the suite's own). Returns -n's
// option, whose count says whether -n was given.
CLI::Option* add_timing_options(CLI::App& app, Options& o, TextFlags& t) {
  add(app, "-b,--min-bytes", t.min_b, "smallest size (bytes; K, M, G suffixes)")->capture_default_str();
  add(app, "-e,--max-bytes", t.max_b, "largest size")->capture_default_str();
  add(app, "-f,--step-factor", o.step_factor, "multiply the size by this between points (>= 2)")->capture_default_str();
  add(app, "--sizes", t.sizes, "exactly these sizes instead of -b/-e/-f: a comma list (K, M, G suffixes), e.g. "
                               "8,24,1K,3K");
  auto* iters_opt = add(app, "-n,--iters", o.iters,
                        "timed iterations per size: given, exactly this many; by default at least this many "
                        "and at least --min-time seconds")->capture_default_str();
  add(app, "--min-time", o.min_time, "without -n: keep timing a size until this many seconds of calls")->capture_default_str();
  add(app, "--max-iters", o.max_iters, "without -n: at most this many timed iterations per size")->capture_default_str();
  add(app, "-w,--warmup", t.warmup, "untimed calls per size before timing: a number, or auto (until the time per "
                                    "call is stable)")->capture_default_str();
  add(app, "--warmup-tolerance", o.warmup_policy.tolerance,
      "auto warm-up: stable when the median of the last 10 calls is within this fraction of the previous 10's")
      ->capture_default_str();
  add(app, "--warmup-max", o.warmup_policy.max_calls, "auto warm-up: give up (not converged) after this many calls")
      ->capture_default_str();
  add(app, "--warmup-time", o.warmup_policy.max_seconds, "auto warm-up: give up (not converged) after this many seconds")
      ->capture_default_str();
  add(app, "--rank-stat", t.rank_stat, "per-iteration time over ranks: max (slowest rank), avg (OSU), min or rank0")
      ->capture_default_str();
  add(app, "--op-timeout", o.op_timeout, "abort the job (exit 3) when one call has not completed after this many "
                                         "seconds (0: never)")->capture_default_str();
  add(app, "-c,--check", o.check, "verify the result of the first call at each size (0 or 1)")->capture_default_str();
  return iters_opt;
}

// What runs and where the results go: types, ops, backend, memory, placement, timing, output,
// the mesh group, and the hidden fault injection.
void add_run_options(CLI::App& app, Options& o, TextFlags& t, bool reduces, bool rooted) {
  add(app, "-d,--dtype", t.dtype, "float, double, int32, int8, bf16, half, a comma list, or all")->capture_default_str();
  // Accepted by every binary, so one command line or environment serves them all.
  add(app, "-o,--op", t.op, reduces ? "sum, prod, min, max, avg, a comma list, or all"
                                    : "reduction op (ignored: this collective does not reduce)")->capture_default_str();
  add(app, "-r,--root", o.root, rooted ? "root rank" : "root rank (ignored: this collective has no root)")
      ->capture_default_str();
  add(app, "--backend", t.backend, "mpi or nccl")->capture_default_str();
  add(app, "--mem", t.mem, "host or device (default: host for mpi, device for nccl)");
  add(app, "--inplace", t.inplace, "yes, no or both")->capture_default_str();
  add(app, "--timing", t.timing,
      "auto (stream on nccl, isolated on mpi), isolated (barrier before each call, not timed), pipelined "
      "(back-to-back calls, each timed), window (each call starts at a scheduled time on synchronised clocks; "
      "ReproMPI), stream (nccl: n back-to-back calls between two events on the stream; nccl-tests) or graph (nccl: "
      "those calls captured once as a CUDA graph; nccl-tests -G)")->capture_default_str();
  add(app, "-O,--output", o.output, "HDF5 file to write (never overwritten; a .jsonl summary goes beside it)");
  core::with_env(app.add_flag("--append", o.append, "add this run to an existing --output file"));
  add(app, "--tag", o.tag, "a label stored with the run (e.g. the fabric's name)");
  add(app, "--time-limit", o.time_limit, "stop starting new sizes after this many seconds (0: none)")->capture_default_str();
  core::with_env(app.add_flag("-q,--quiet", o.quiet, "print only the verdict and where results went"));
  add(app, "--mesh", o.mesh, "device mesh degrees, e.g. tp=2,dp=2 (with --group)");
  add(app, "--order", o.order, "mesh order, leftmost varies fastest")->capture_default_str();
  add(app, "--group", o.group, "run the collective in every group of this mesh dimension at once")->capture_default_str();
  add(app, "--groups-file", o.groups_file, "custom groups: one group per line, as rank lists");
  add(app, "--ranks-per-node", o.ranks_per_node, "emulate nodes of N ranks in reports (testing)");
  add(app, "--inject-fault", o.inject_fault, "corrupt one element of this rank's result (tests)")->group("");
}

// all_to_allv_bench's workload: the routing that fixes the per-peer counts.
void add_routing_options(CLI::App& app, Options& o, TextFlags& t) {
  add(app, "--routing", t.routing, "token-to-expert workload: balanced, hot-expert, hot-rank, zipf:S or rotating "
                                   "(docs/collectives.md: Routing workloads)")->capture_default_str();
  add(app, "--top-k", o.top_k, "experts per token (k)")->capture_default_str();
  add(app, "--experts", o.experts, "experts E, spread E/n over the n ranks of the group")->capture_default_str();
  add(app, "--hidden", o.hidden, "elements per token (the hidden size): a token-expert pair sends this many")
      ->capture_default_str();
  add(app, "--seed", o.seed, "seed of the routing draws")->capture_default_str();
}

// -w/--warmup: a number of calls, or auto (-1 in Options::warmup).
void parse_warmup(Options& o, const std::string& warmup) {
  if (warmup == "auto") return;
  std::size_t used = 0;
  try {
    o.warmup = std::stoi(warmup, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != warmup.size() || used == 0)
    throw UsageError(fmt::format("-w/--warmup: '{}' is not a number of calls or auto", warmup));
  if (o.warmup < 0) throw UsageError("-w/--warmup must not be negative");
}

core::RankStat parse_rank_stat(const std::string& s) {
  if (s == "max") return core::RankStat::kMax;
  if (s == "avg") return core::RankStat::kAvg;
  if (s == "min") return core::RankStat::kMin;
  if (s == "rank0") return core::RankStat::kRank0;
  throw UsageError(fmt::format("--rank-stat: '{}' is not max, avg, min or rank0", s));
}

// The sizes, iterations, warm-up and limits, in the order a user reads them in --help.
// --sizes and -b/-e/-f are alternatives. A sweep flag set in the environment gives way to
// --sizes typed on the command line (the command line wins, as everywhere); any other pair is
// refused.
void check_timing(Options& o, const TextFlags& t, const CLI::App& app, const core::EnvSources& env,
                  const CLI::Option* iters_opt) {
  if (t.sizes.empty()) {
    o.min_bytes = size_arg("-b/--min-bytes", t.min_b);
    o.max_bytes = size_arg("-e/--max-bytes", t.max_b);
    if (o.min_bytes > o.max_bytes)
      throw UsageError(fmt::format("-b/--min-bytes ({}) must not exceed -e/--max-bytes ({})", t.min_b, t.max_b));
  } else {
    for (const char* f : {"--min-bytes", "--max-bytes", "--step-factor"})
      if (app.get_option(f)->count() > 0 && !(core::from_env(env, f) && !core::from_env(env, "--sizes")))
        throw UsageError(fmt::format("--sizes and {} are alternatives: give the sizes as a list or as a sweep", f));
    for (const auto& part : split(t.sizes)) o.sizes.push_back(size_arg("--sizes", part));
    if (o.sizes.empty()) throw UsageError("--sizes: give at least one size");
    std::sort(o.sizes.begin(), o.sizes.end());
    o.sizes.erase(std::unique(o.sizes.begin(), o.sizes.end()), o.sizes.end());
    o.min_bytes = o.sizes.front();
    o.max_bytes = o.sizes.back();
  }
  if (o.step_factor < 2) throw UsageError("-f/--step-factor must be at least 2");
  if (o.iters < 1) throw UsageError("-n/--iters must be at least 1");
  o.iters_fixed = iters_opt->count() > 0;
  if (!(o.min_time >= 0)) throw UsageError("--min-time must not be negative");
  if (o.max_iters < o.iters && !o.iters_fixed)
    throw UsageError(fmt::format("--max-iters ({}) must be at least -n/--iters ({})", o.max_iters, o.iters));
  parse_warmup(o, t.warmup);
  if (!(o.warmup_policy.tolerance > 0 && o.warmup_policy.tolerance < 1))
    throw UsageError("--warmup-tolerance must be between 0 and 1 (a fraction, e.g. 0.05)");
  if (o.warmup_policy.max_calls < 1) throw UsageError("--warmup-max must be at least 1");
  if (!(o.warmup_policy.max_seconds > 0)) throw UsageError("--warmup-time must be positive");
  o.warmup_policy.floor_seconds = o.warmup_policy.max_seconds / 4;
  o.rank_stat = parse_rank_stat(t.rank_stat);
  core::check_seconds("--op-timeout", o.op_timeout, "no watchdog");
  if (o.check != 0 && o.check != 1) throw UsageError("-c/--check must be 0 or 1");
  core::check_seconds("--time-limit", o.time_limit, "no limit");
  if (o.root < 0) throw UsageError("-r/--root must not be negative");
  if (o.ranks_per_node < 0) throw UsageError("--ranks-per-node must not be negative");
}

// -d and -o: comma lists, or all (then what the backend lacks is skipped, not refused).
void parse_types(Options& o, const TextFlags& t) {
  o.dtypes.clear();
  if (t.dtype == "all") {
    o.all_dtypes = true;
    o.dtypes.assign(comm::kAllDTypes.begin(), comm::kAllDTypes.end());
  } else {
    for (const auto& d : split(t.dtype)) {
      auto dt = comm::parse_dtype(d);
      if (!dt) throw UsageError(fmt::format("-d/--dtype: unknown type '{}' (use float, double, int32, int8, bf16, half or all)", d));
      o.dtypes.push_back(*dt);
    }
    if (o.dtypes.empty()) throw UsageError("-d/--dtype: no type given");
  }
  o.ops.clear();
  if (t.op == "all") {
    o.all_ops = true;
    o.ops.assign(comm::kAllRedOps.begin(), comm::kAllRedOps.end());
  } else {
    for (const auto& p : split(t.op)) {
      auto r = comm::parse_redop(p);
      if (!r) throw UsageError(fmt::format("-o/--op: unknown op '{}' (use sum, prod, min, max, avg or all)", p));
      o.ops.push_back(*r);
    }
    if (o.ops.empty()) throw UsageError("-o/--op: no op given");
  }
}

// --backend, --mem, --inplace and --timing, and the pairs among them that cannot work.
void parse_placement(Options& o, const TextFlags& t) {
  if (t.backend == "mpi") o.backend = comm::Backend::kMpi;
  else if (t.backend == "nccl") o.backend = comm::Backend::kNccl;
  else throw UsageError(fmt::format("--backend: unknown backend '{}' (use mpi or nccl)", t.backend));
  if (t.mem.empty()) o.mem = o.backend == comm::Backend::kNccl ? compute::MemKind::kDevice : compute::MemKind::kHost;
  else if (t.mem == "host") o.mem = compute::MemKind::kHost;
  else if (t.mem == "device") o.mem = compute::MemKind::kDevice;
  else throw UsageError(fmt::format("--mem: unknown memory '{}' (use host or device)", t.mem));
  if (o.backend == comm::Backend::kNccl && o.mem == compute::MemKind::kHost)
    throw UsageError("--mem host: backend nccl works on device memory only (use --mem device or --backend mpi)");
  static const std::map<std::string, InplaceMode> kInplace = {
      {"yes", InplaceMode::kYes}, {"no", InplaceMode::kNo}, {"both", InplaceMode::kBoth}};
  if (!kInplace.count(t.inplace)) throw UsageError(fmt::format("--inplace: '{}' is not yes, no or both", t.inplace));
  o.inplace = kInplace.at(t.inplace);
  const bool nccl = o.backend == comm::Backend::kNccl;
  if (t.timing == "auto") o.timing = nccl ? Timing::kStream : Timing::kIsolated;
  else if (t.timing == "isolated") o.timing = Timing::kIsolated;
  else if (t.timing == "pipelined") o.timing = Timing::kPipelined;
  else if (t.timing == "window") o.timing = Timing::kWindow;
  else if (t.timing == "stream") o.timing = Timing::kStream;
  else if (t.timing == "graph") o.timing = Timing::kGraph;
  else throw UsageError(fmt::format("--timing: '{}' is not auto, isolated, pipelined, window, stream or graph", t.timing));
  if (o.timing == Timing::kWindow && nccl)
    throw UsageError("--timing window needs --backend mpi (it times on host clocks; NCCL calls return before they finish)");
  if ((o.timing == Timing::kStream || o.timing == Timing::kGraph) && !nccl)
    throw UsageError(fmt::format("--timing {} needs --backend nccl (it times on the device stream)", t.timing));
}

void parse_routing_workload(Options& o, const TextFlags& t) {
  o.routing = core::parse_routing(t.routing);
  if (o.routing.mode == core::RoutingMode::kLearned)
    throw UsageError("--routing learned: there is no router in a collective benchmark (use balanced, hot-expert, "
                     "hot-rank, zipf:S or rotating; step_bench's MoE layer learns its routing)");
  if (o.hidden < 1) throw UsageError("--hidden must be at least 1 (elements per token)");
  core::RoutingShape shape;
  shape.experts = o.experts;
  shape.top_k = o.top_k;
  core::check_routing_shape(shape);  // E >= 1, 1 <= k <= E; E % ranks is checked once the group is known
}

std::optional<Options> parse_checked(core::EnvSources& env, const std::string& binary, bool reduces, bool rooted, int argc,
                                     char** argv, bool print, bool routed) {
  Options o;
  TextFlags t;
  CLI::App app{fmt::format("{}: meshbench collective benchmark (see docs/collectives.md). Every option can also be "
                           "set as MESHBENCH_<OPTION> in the environment, e.g. MESHBENCH_ITERS=50.",
                           binary),
               binary};
  app.get_formatter()->column_width(34);
  const CLI::Option* iters_opt = add_timing_options(app, o, t);
  add_run_options(app, o, t, reduces, rooted);
  if (routed) add_routing_options(app, o, t);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (print) std::fputs(app.help().c_str(), stdout);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    env = core::env_sources(app, argc, argv);
    throw UsageError(core::parse_message(app, e));
  }
  env = core::env_sources(app, argc, argv);

  check_timing(o, t, app, env, iters_opt);
  parse_types(o, t);
  parse_placement(o, t);
  if (o.append && o.output.empty()) throw UsageError("--append needs -O/--output FILE.h5");
  if (routed) parse_routing_workload(o, t);
  if (!o.groups_file.empty() && o.group != "world" && !o.mesh.empty())
    throw UsageError("--groups-file and --mesh/--group are alternatives: give one");
  return o;
}

}  // namespace

std::vector<std::uint64_t> size_sweep(const Options& o) {
  if (!o.sizes.empty()) return o.sizes;
  std::vector<std::uint64_t> sizes;
  std::uint64_t s = o.min_bytes;
  while (s <= o.max_bytes) {
    sizes.push_back(s);
    if (s == 0) {
      s = 1;
      continue;
    }
    if (s > o.max_bytes / o.step_factor) break;
    s *= o.step_factor;
  }
  return sizes;
}

std::optional<Options> parse_options(const std::string& binary, bool reduces, bool rooted, int argc,
                                     char** argv, bool print, bool routed) {
  core::EnvSources env;
  try {
    return parse_checked(env, binary, reduces, rooted, argc, argv, print, routed);
  } catch (const UsageError& e) {
    throw UsageError(core::note_env(env, e.what()));
  }
}

}  // namespace meshbench::collectives
