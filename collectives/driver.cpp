// The shared driver of the collective benchmarks: options, communicator, size sweep,
// timing, verification, statistics and reporting. A plug-in (spec.hpp) supplies only what
// differs per collective. Timing never includes verification or data initialisation.
#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>

#include "comm/agree.hpp"
#include "comm/clock_sync.hpp"
#include "comm/finalize.hpp"
#include "comm/peer_board.hpp"
#include "comm/topology.hpp"
#include "comm/watched_comm.hpp"
#include "core/op_watch.hpp"
#include "core/error.hpp"
#include "core/stats.hpp"
#include "core/timer.hpp"
#include "compute/device.hpp"
#include "core/units.hpp"
#include "data.hpp"
#include "groups.hpp"
#include "results/hang.hpp"
#include "results/output_path.hpp"
#include "results/stop_signal.hpp"
#include "options.hpp"
#include "results/reporter.hpp"
#include "runner.hpp"
#include "spec.hpp"

namespace meshbench::collectives {
namespace {

namespace fs = std::filesystem;
using comm::DType;
using comm::RedOp;
using core::UsageError;
using results::Placement;
using results::HangSite;
using results::report_hang;

Layout layout_of(const PeerMatrix& m) { return {m.send.total(), m.recv.total()}; }

// The element counts to run for one dtype: rounded down to the collective's granularity (and
// to whole tokens for all-to-all-v), duplicates removed. Throws when every requested size
// rounds to nothing.
std::vector<std::size_t> counts_for(const Spec& spec, const Options& opt, DType t, int n, const std::string& binary) {
  std::size_t elt = comm::size_of(t), gran = spec.granularity(n) * (spec.unit ? spec.unit(opt) : 1);
  std::vector<std::size_t> counts;
  for (std::uint64_t bytes : size_sweep(opt)) {
    std::size_t c = bytes / elt / gran * gran;
    if (c == 0 && bytes != 0) continue;
    if (counts.empty() || counts.back() != c) counts.push_back(c);
  }
  if (counts.empty())
    throw UsageError(fmt::format(
        "{}: every size rounds down to 0 elements for {} of {} on a group of {} "
        "ranks (a size must hold at least {} elements = {} B{})",
        opt.sizes.empty() ? fmt::format("-b/--min-bytes {} .. -e/--max-bytes {}", opt.min_bytes, opt.max_bytes)
                          : fmt::format("--sizes {} .. {}", opt.min_bytes, opt.max_bytes),
        binary, comm::name(t), n, gran, gran * elt,
        spec.unit ? ": one token of --top-k x --hidden elements" : ""));
  return counts;
}

// What the sweep runs: one block per dtype x op with a placement the backend supports, each
// block's dtype and op and its element counts, and the pairs -d all / -o all left out.
struct Work {
  std::vector<results::Block> blocks;
  std::vector<std::pair<DType, std::optional<RedOp>>> keys;  // by block
  std::vector<std::vector<std::size_t>> counts;             // by block
  std::vector<std::string> skipped;                         // "bf16 sum: <the backend's reason>"
};

// The reporters, which live on world rank 0 only (the records are gathered there; the files
// are its alone), and rank 0's first failure to write, which ends the run.
struct Reporters {
  int rank = 0;
  std::vector<std::unique_ptr<results::Reporter>> list;
  std::string write_error;

  // Calls f on each reporter (rank 0, until a write fails).
  template <typename F>
  void each(F&& f) {
    if (rank != 0 || !write_error.empty()) return;
    try {
      for (auto& r : list) {
        f(*r);
        if (write_error.empty() && !r->error().empty()) write_error = r->error();
      }
    } catch (const std::exception& e) {
      write_error = e.what();
    }
  }
};

// What one size is measured with, all set up before the sweep.
struct Sweep {
  const Spec& spec;
  const Options& opt;
  const GroupPlan& plan;
  comm::Communicator& group_comm;
  Runner& runner;
  Buffers& bufs;
};

// The end of the sweep: how it stopped, and the wrong elements over every point.
struct SweepEnd {
  results::RunStatus status = results::RunStatus::kOk;
  std::uint64_t wrong = 0;
};

// Every rank's clock offset against rank 0 and its error (window timing), on every rank.
struct Clocks {
  comm::ClockOffset mine;  // this rank's estimate
  nlohmann::ordered_json offset_s, error_s;  // by rank
  double max_error_s = 0;
};
constexpr int kClockRounds = 20;

void start_watch(core::OpWatch& watch, const HangSite& site) {
  watch.set_peer_state(comm::my_peer_state());  // a hang elsewhere can tell whether this rank arrived
  watch.start(site.op_timeout, [site](const core::Hang& h) { report_hang(site, h); });
}

// Output: claimed by rank 0 before any set-up (results/output_path.hpp): never overwritten,
// one writer at a time, folders made once.
void claim_output(results::OutputClaim& claim, const Options& opt, MPI_Comm world, int rank,
                  const std::string& binary) {
  std::string out_error;
  if (!opt.output.empty() && rank == 0) out_error = claim.claim(opt.output, opt.append, binary);
  results::agree_claim(world, claim, out_error);
}

void check_world_ranks(const Spec& spec, const Options& opt, int size) {
  if (spec.rooted && opt.root >= size)
    throw UsageError(fmt::format("-r/--root {} is not a rank of the {}-rank world", opt.root, size));
  if (opt.inject_fault >= size)
    throw UsageError(fmt::format("--inject-fault {} is not a rank of the {}-rank world", opt.inject_fault, size));
}

// Devices: refused on every rank if any rank lacks one. Returns this rank's device count.
int check_devices(const Options& opt, MPI_Comm world, int rank) {
  int devices = compute::device_count();
  std::string dev_error;
  if (opt.backend == comm::Backend::kNccl && !comm::built_with_nccl())
    dev_error = "--backend nccl: this meshbench was built without NCCL (use --backend mpi)";
  else if (opt.mem == compute::MemKind::kDevice && devices == 0)
    dev_error = opt.backend == comm::Backend::kNccl
                    ? fmt::format("--backend nccl: no usable GPU on rank {} ({}: {}): NCCL needs one GPU per rank (use --backend mpi)",
                                  rank, comm::host_name(), compute::probe_gpus().detail)
                    : fmt::format("--mem device: no usable GPU on rank {} ({}: {})", rank, comm::host_name(),
                                  compute::probe_gpus().detail);
  comm::agree_or_throw(world, dev_error);
  return devices;
}

// This rank's GPU (its local rank modulo the node's GPUs; -1 without any), selected under
// --mem device, where `topo` records every rank's device too.
int bind_device(const Options& opt, int rank, int devices, comm::Topology& topo) {
  int local_device = devices > 0 ? topo.ranks[static_cast<std::size_t>(rank)].local_rank % devices : -1;
  if (opt.mem == compute::MemKind::kDevice) {
    compute::set_device(local_device);
    for (auto& p : topo.ranks) p.device = fmt::format("cuda:{}", p.local_rank % devices);
  }
  return local_device;
}

// The communicator of this rank's group on the chosen backend, behind the watchdog when it runs.
std::unique_ptr<comm::Communicator> open_group_comm(const Spec& spec, const Options& opt, const GroupPlan& plan,
                                                    int local_device, core::OpWatch* watched) {
  std::string group_name = plan.dim == "world" ? "world" : fmt::format("{}#{}", plan.dim, plan.my_group);
  const int n = plan.group_size;
  std::unique_ptr<comm::Communicator> comm =
      opt.backend == comm::Backend::kNccl ? comm::make_nccl_communicator(plan.comm, group_name, local_device)
                                          : comm::make_mpi_communicator(plan.comm, group_name);
  if (spec.rooted && opt.root >= n)
    throw UsageError(fmt::format("-r/--root {} is not a rank of the {}-rank {} groups", opt.root, n, plan.dim));
  if (spec.peers) spec.peers(opt, 0, n, 0);  // all-to-all-v: the routing fits the group (E % n)
  if (watched) comm = comm::make_watched(std::move(comm), *watched);
  return comm;
}

// The block of one dtype and op, with the placements --inplace asks for that the backend runs.
results::Block make_block(const Spec& spec, const Options& opt, const GroupPlan& plan, const comm::Communicator& c,
                          DType t, std::optional<RedOp> op) {
  results::Block b;
  b.collective = std::string(comm::name(spec.kind));
  b.dtype = std::string(comm::name(t));
  b.redop = op ? std::string(comm::name(*op)) : "none";
  b.root = spec.rooted ? opt.root : -1;
  b.group = plan.dim;
  b.group_size = plan.group_size;
  b.groups = static_cast<int>(plan.run_groups.size());
  b.bus_factor = comm::bus_factor(spec.kind, plan.group_size);
  b.timing = name(opt.timing);
  b.iters = opt.iters;
  b.warmup = opt.warmup;
  b.rank_stat = core::name(opt.rank_stat);
  if (spec.peers) b.count_unit = "tokens";
  for (int p = 0; p < 2; ++p) {
    bool want = p == 0 ? opt.inplace != InplaceMode::kYes : opt.inplace != InplaceMode::kNo;
    auto why = c.unsupported(spec.kind, t, op, p == 1, opt.mem);
    b.runs[static_cast<std::size_t>(p)] = want && !why;
    if (want && why) b.why_not[static_cast<std::size_t>(p)] = *why;
  }
  return b;
}

// A block with no placement to run: skipped ("bf16 sum: why") when -d all or -o all listed a
// pair the backend lacks, else the backend's reason is a usage error.
std::string skip_or_refuse(const Spec& spec, const Options& opt, const comm::Communicator& c, const results::Block& b,
                           DType t, std::optional<RedOp> op) {
  std::string why = !b.why_not[0].empty() ? b.why_not[0] : b.why_not[1];
  bool listed = (opt.all_dtypes && c.unsupported(spec.kind, t, std::nullopt, false, opt.mem)) ||
                (opt.all_ops && op && c.unsupported(spec.kind, DType::kFloat, op, false, opt.mem));
  if (!listed && opt.inplace != InplaceMode::kBoth)
    throw UsageError(fmt::format("{} (asked for --inplace {})", why, name(opt.inplace)));
  if (!listed) throw UsageError(why);
  return fmt::format("{} {}: {}", b.dtype, b.redop, why);
}

// What runs: dtype x op blocks, each with the placements the backend supports, and their sizes.
Work plan_work(const Spec& spec, const Options& opt, const comm::Communicator& c, const GroupPlan& plan,
               const std::string& binary) {
  std::vector<std::optional<RedOp>> ops;
  if (spec.reduces) ops.assign(opt.ops.begin(), opt.ops.end());
  else ops.push_back(std::nullopt);
  Work w;
  for (DType t : opt.dtypes) {
    for (auto op : ops) {
      results::Block b = make_block(spec, opt, plan, c, t, op);
      if (!b.runs[0] && !b.runs[1]) {
        w.skipped.push_back(skip_or_refuse(spec, opt, c, b, t, op));
        continue;
      }
      w.blocks.push_back(b);
      w.keys.emplace_back(t, op);
    }
  }
  if (w.blocks.empty()) throw UsageError("nothing to run: " + (w.skipped.empty() ? std::string("?") : w.skipped.front()));
  for (auto& [t, op] : w.keys) w.counts.push_back(counts_for(spec, opt, t, plan.group_size, binary));
  return w;
}

// The run's attributes from the options and the groups (the rest come from make_run_context).
void set_run_attrs(nlohmann::ordered_json& a, const Spec& spec, const Options& opt, const GroupPlan& plan) {
  a["tag"] = opt.tag;
  a["backend"] = std::string(comm::name(opt.backend));
  a["mem"] = opt.mem == compute::MemKind::kHost ? "host" : opt.backend == comm::Backend::kMpi ? "device-staged" : "device";
  a["nccl_version"] = opt.backend == comm::Backend::kNccl ? comm::nccl_version() : "none";
  a["timing"] = name(opt.timing);
  a["iters"] = opt.iters;
  a["iters_fixed"] = opt.iters_fixed;
  a["min_time"] = opt.min_time;
  a["max_iters"] = opt.max_iters;
  a["warmup"] = opt.warmup;  // -1: adaptive
  a["warmup_tolerance"] = opt.warmup_policy.tolerance;
  a["warmup_max"] = opt.warmup_policy.max_calls;
  a["warmup_time"] = opt.warmup_policy.max_seconds;
  a["rank_stat"] = core::name(opt.rank_stat);
  a["op_timeout"] = opt.op_timeout;
  a["check"] = opt.check;
  a["order"] = plan.mesh_json.empty() ? "" : opt.order;
  a["mesh"] = plan.mesh_json.empty() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::parse(plan.mesh_json);
  a["group_dim"] = plan.dim;
  a["groups"] = static_cast<int>(plan.run_groups.size());
  a["comm_setup_seconds"] = plan.setup_seconds;
  if (spec.peers) {  // all_to_allv_bench: the workload behind the per-peer counts
    a["routing"] = core::name(opt.routing);
    a["top_k"] = opt.top_k;
    a["experts"] = opt.experts;
    a["hidden"] = opt.hidden;
    a["routing_seed"] = opt.seed;
  }
}

// Window timing: every rank's clock offset against rank 0 (and its error), gathered everywhere.
Clocks gather_clocks(MPI_Comm world, int size) {
  Clocks c;
  c.mine = comm::estimate_clock_offset(world, kClockRounds);
  std::vector<double> both(2 * static_cast<std::size_t>(size)), mine{c.mine.offset_s, c.mine.error_s};
  MB_CHECK_MPI(MPI_Allgather(mine.data(), 2, MPI_DOUBLE, both.data(), 2, MPI_DOUBLE, world), "world");
  c.offset_s = nlohmann::ordered_json::array();
  c.error_s = nlohmann::ordered_json::array();
  for (int r = 0; r < size; ++r) {
    c.offset_s.push_back(both[2 * static_cast<std::size_t>(r)]);
    c.error_s.push_back(both[2 * static_cast<std::size_t>(r) + 1]);
    c.max_error_s = std::max(c.max_error_s, both[2 * static_cast<std::size_t>(r) + 1]);
  }
  return c;
}

// Window timing, at the end: the clocks again, stored per rank. The change over the run is
// each clock's drift against rank 0's.
void report_clock_drift(MPI_Comm world, int size, double clock_t0, const Clocks& start, core::OpWatch* watched,
                        Reporters& out) {
  double elapsed = core::now_seconds() - clock_t0;  // rank 0's: attribute values must agree
  MB_CHECK_MPI(MPI_Bcast(&elapsed, 1, MPI_DOUBLE, 0, world), "world");
  comm::WatchScope w(watched, "clock offset estimate (end)", 0, "world");
  Clocks end = gather_clocks(world, size);
  nlohmann::ordered_json drift = nlohmann::ordered_json::array();
  for (std::size_t r = 0; r < end.offset_s.size(); ++r)
    drift.push_back((end.offset_s[r].get<double>() - start.offset_s[r].get<double>()) / elapsed);
  nlohmann::ordered_json attrs = {
      {"clock_offset_end_s", end.offset_s}, {"clock_error_end_s", end.error_s}, {"clock_drift", drift}};
  out.each([&](results::Reporter& r) { r.add_run_attrs(attrs); });
}

// Console on rank 0, and the HDF5 and JSON-lines files with -O. A file that cannot be read to
// append to is a write error (it ends the run once every rank knows).
Reporters open_reporters(int rank, const Options& opt, const results::OutputClaim& claim, results::RunContext& ctx) {
  Reporters out;
  out.rank = rank;
  if (rank != 0) return out;
  out.list.push_back(std::make_unique<results::ConsoleReporter>(rank, opt.quiet));
  if (!opt.output.empty()) {
    try {
      out.list.push_back(std::make_unique<results::Hdf5Reporter>(opt.output, claim.appending(), ctx));
    } catch (const std::exception& e) {
      out.write_error = fmt::format("cannot read {} to append to it: {}", opt.output, e.what());
    }
    out.list.push_back(std::make_unique<results::JsonLinesReporter>(results::jsonl_path(opt.output)));
  }
  return out;
}

// Rank 0's lines before the table: the mesh's warnings, the pairs skipped, all-to-all-v's workload.
void print_notes(const Spec& spec, const Options& opt, const GroupPlan& plan, const std::vector<std::string>& skipped) {
  for (const auto& w : plan.warnings) std::printf("# warning: %s\n", w.c_str());
  for (const auto& s : skipped) std::printf("# skipped %s\n", s.c_str());
  if (spec.peers)
    std::printf("# routing %s, top-k %d, %d experts (%d per rank), hidden %zu, seed %llu: count = tokens per "
                "rank, size = tokens x top-k x hidden x element size (each rank's send buffer); busbw = bytes "
                "the ranks send to other ranks / n / time\n",
                core::name(opt.routing).c_str(), opt.top_k, opt.experts, opt.experts / plan.group_size, opt.hidden,
                static_cast<unsigned long long>(opt.seed));
}

// Buffers sized for the largest point of any block.
// The bytes of the largest size's send and receive buffers (every dtype of the run).
std::pair<std::size_t, std::size_t> buffer_bytes(const Spec& spec, const Options& opt, const Work& w, int n, int comm_rank) {
  std::size_t max_send = 0, max_recv = 0;
  for (std::size_t k = 0; k < w.keys.size(); ++k) {
    std::size_t elt = comm::size_of(w.keys[k].first);
    Layout l = spec.peers ? layout_of(spec.peers(opt, w.counts[k].back(), n, comm_rank)) : spec.layout(w.counts[k].back(), n);
    max_send = std::max({max_send, l.send * elt, spec.inplace_buffer(l) * elt});
    max_recv = std::max(max_recv, l.recv * elt);
  }
  return {max_send, max_recv};
}

Buffers make_buffers(const Spec& spec, const Options& opt, const Work& w, int n, int comm_rank) {
  const auto [max_send, max_recv] = buffer_bytes(spec, opt, w, n, comm_rank);
  return Buffers{compute::Buffer(opt.mem, max_send), compute::Buffer(opt.mem, max_recv),
                 std::vector<std::byte>(std::max(max_send, max_recv)), std::vector<std::byte>(std::max(max_send, max_recv))};
}

// Before the results file is started: the buffers of the largest size (send, receive and the
// two host copies the check fills) against what each rank can have, the ranks of a host
// sharing its memory (or each its GPU's with --mem device). A size that cannot fit is exit 2 on
// every rank, naming -e and the bytes, instead of an allocation failing mid-run.
void check_buffer_memory(const Spec& spec, const Options& opt, const Work& w, const GroupPlan& plan,
                         const comm::Topology& topo, MPI_Comm world, int rank, int comm_rank) {
  const auto [send, recv] = buffer_bytes(spec, opt, w, plan.group_size, comm_rank);
  const double host_copies = 2.0 * static_cast<double>(std::max(send, recv));
  const bool device = opt.mem == compute::MemKind::kDevice;
  const double on_host = host_copies + (device ? 0.0 : static_cast<double>(send) + static_cast<double>(recv));
  const std::string& host = topo.ranks[static_cast<std::size_t>(rank)].host;
  int ranks_here = 0;
  for (const auto& p : topo.ranks) ranks_here += p.host == host ? 1 : 0;
  std::string problem;
  const double have = static_cast<double>(compute::host_memory_available());
  if (have > 0 && on_host * ranks_here > have)
    problem = fmt::format("-e/--max-bytes {}: the largest size needs {} of buffers per rank ({} ranks on host {}: {}), "
                          "and the host has {} available; lower -e/--max-bytes",
                          core::format_size(opt.max_bytes), core::human_bytes(on_host), ranks_here, host,
                          core::human_bytes(on_host * ranks_here), core::human_bytes(have));
  if (problem.empty() && device) {
    const double dev = static_cast<double>(send) + static_cast<double>(recv);
    const double free = static_cast<double>(compute::device_memory_free());
    if (free > 0 && dev > free)
      problem = fmt::format("-e/--max-bytes {}: the largest size needs {} of device buffers per rank, and the GPU "
                            "has {} free; lower -e/--max-bytes",
                            core::format_size(opt.max_bytes), core::human_bytes(dev), core::human_bytes(free));
  }
  comm::agree_or_throw(world, problem);
}

// Size ci of block b: each placement the block runs, measured, with its bandwidths; the wrong
// elements are added to `wrong`.
results::Row measure_size(Sweep& s, const results::Block& b, const std::pair<DType, std::optional<RedOp>>& key,
                          const std::vector<std::size_t>& counts, std::size_t ci, std::uint64_t& wrong) {
  const int n = s.plan.group_size;
  std::size_t count = counts[ci];
  std::optional<PeerMatrix> peers;
  if (s.spec.peers) peers = s.spec.peers(s.opt, count, n, s.group_comm.rank());
  Inputs in{key.first, key.second, n, s.spec.rooted ? s.opt.root : 0,
            peers ? layout_of(*peers) : s.spec.layout(count, n), &s.plan.members, peers ? &*peers : nullptr};
  results::Row row;
  std::size_t elt = comm::size_of(in.dtype);
  row.sizes = {count * elt, count, in.layout.send * elt, in.layout.recv * elt, s.spec.total_bytes(count, elt, n)};
  // All-to-all-v: count = tokens per rank, the largest receive of any rank, and the bytes
  // the group's ranks actually send to other ranks (busbw's W times n).
  if (peers) row.sizes = {count * elt, count / s.spec.unit(s.opt), in.layout.send * elt, peers->max_recv() * elt,
                          peers->off_rank() * elt};
  for (int p = 0; p < 2; ++p) {
    if (!b.runs[static_cast<std::size_t>(p)]) continue;
    std::string where = fmt::format("size {} of {} ({} B), {} {} {}", ci + 1, counts.size(), row.sizes.bytes,
                                    b.collective, b.dtype, b.redop);
    results::PointResult pt = s.runner.measure(in, static_cast<Placement>(p), s.bufs, where);
    pt.algbw = core::gb_per_s(static_cast<double>(row.sizes.bytes), pt.t_median);
    pt.busbw = peers ? core::gb_per_s(static_cast<double>(row.sizes.total_bytes) / n, pt.t_median)
                     : pt.algbw * b.bus_factor;
    wrong += pt.wrong;
    row.by_placement[static_cast<std::size_t>(p)] = std::move(pt);
  }
  return row;
}

// Stop together: rank 0 could not write (3), a signal on any rank (2), or rank 0's clock past
// --time-limit (1); the highest code wins, 0 goes on. A write failure is raised on every rank.
int agree_to_stop(const Options& opt, MPI_Comm world, int rank, double t0, Reporters& out, core::OpWatch* watched) {
  int code = results::stop_signal() ? 2 : 0;
  if (rank == 0 && opt.time_limit > 0 && core::now_seconds() - t0 > opt.time_limit) code = std::max(code, 1);
  if (rank == 0 && !out.write_error.empty()) code = 3;
  int agreed = 0;
  comm::WatchScope w(watched, "MPI_Allreduce (stop decision)", sizeof code, "world");
  MB_CHECK_MPI(MPI_Allreduce(&code, &agreed, 1, MPI_INT, MPI_MAX, world), "world");
  if (agreed == 3) comm::agree_on_fault(world, out.write_error);
  return agreed;
}

// The sweep: every size of every block, reported row by row, until the end or an agreed stop.
SweepEnd run_sweep(Sweep& s, const Work& w, Reporters& out, MPI_Comm world, int rank, core::OpWatch* watched) {
  SweepEnd end;
  double t0 = core::now_seconds();
  bool stop = false;
  for (std::size_t k = 0; k < w.blocks.size() && !stop; ++k) {
    const results::Block& b = w.blocks[k];
    out.each([&](results::Reporter& r) { r.begin_block(b); });
    for (std::size_t ci = 0; ci < w.counts[k].size(); ++ci) {
      results::Row row = measure_size(s, b, w.keys[k], w.counts[k], ci, end.wrong);
      out.each([&](results::Reporter& r) { r.row(b, row); });
      if (int agreed = agree_to_stop(s.opt, world, rank, t0, out, watched)) {
        end.status = agreed == 2 ? results::RunStatus::kKilled : results::RunStatus::kTimeout;
        stop = true;
        break;
      }
    }
    out.each([&](results::Reporter& r) { r.end_block(b); });
  }
  if (end.status == results::RunStatus::kOk && end.wrong > 0) end.status = results::RunStatus::kFailed;
  return end;
}

// Rank 0's last lines: why the sweep stopped early, and where the results went.
void print_end(const Options& opt, results::RunStatus status, const std::string& run_id) {
  if (status == results::RunStatus::kTimeout) std::printf("# stopped: --time-limit %g s reached\n", opt.time_limit);
  if (status == results::RunStatus::kKilled) std::printf("# stopped by a signal; finished sizes are saved\n");
  if (!opt.output.empty())
    std::printf("# results: %s (run %s) and %s\n", opt.output.c_str(), run_id.c_str(), results::jsonl_path(opt.output).c_str());
  std::fflush(stdout);
}

// 1 when an element was wrong (said on rank 0's stderr), 3 when a signal stopped the run, else 0.
int exit_code(const SweepEnd& end, int rank, const std::string& binary) {
  if (end.wrong > 0) {
    if (rank == 0) std::fprintf(stderr, "%s: %llu wrong elements: the check failed\n", binary.c_str(),
                                static_cast<unsigned long long>(end.wrong));
    return static_cast<int>(core::ExitCode::kCheckFailed);
  }
  if (end.status == results::RunStatus::kKilled) return static_cast<int>(core::ExitCode::kRuntime);
  return 0;
}

int run_impl(const Spec& spec, int argc, char** argv, MPI_Comm world) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  std::string binary = fs::path(argv[0]).filename().string();
  core::OpWatch watch;  // outlives the communicator that reports to it

  auto parsed = parse_options(binary, spec.reduces, spec.rooted, argc, argv, rank == 0, spec.peers != nullptr);
  if (!parsed) return 0;
  Options opt = *parsed;
  results::OutputClaim claim;
  claim_output(claim, opt, world, rank, binary);
  // The watchdog covers the set-up too (topology, groups, the output file): a rank stuck
  // there is reported without a file to mark; it restarts with the file once there is one.
  core::OpWatch* watched = opt.op_timeout > 0 ? &watch : nullptr;
  HangSite site{rank, comm::host_name(), binary, "world", opt.op_timeout, "", ""};
  if (watched) start_watch(watch, site);
  std::optional<comm::WatchScope> setup_scope;
  setup_scope.emplace(watched, "set-up (topology, groups, output file; collective)", 0, "world");
  check_world_ranks(spec, opt, size);
  int devices = check_devices(opt, world, rank);
  comm::Topology topo = comm::discover_topology(world, "cpu");
  int local_device = bind_device(opt, rank, devices, topo);

  // The process groups the collective runs in (the world, or every group of a mesh dim).
  GroupPlan plan = plan_groups(opt, world, topo);
  std::unique_ptr<comm::Communicator> comm = open_group_comm(spec, opt, plan, local_device, watched);
  Work work = plan_work(spec, opt, *comm, plan, binary);
  check_buffer_memory(spec, opt, work, plan, topo, world, rank, comm->rank());

  results::RunContext ctx = results::make_run_context(world, binary, argc, argv, topo);
  set_run_attrs(ctx.attrs, spec, opt, plan);
  double clock_t0 = core::now_seconds();
  Clocks clocks;  // at the start (window timing)
  if (opt.timing == Timing::kWindow) {
    clocks = gather_clocks(world, size);
    ctx.attrs["clock_sync_rounds"] = kClockRounds;
    ctx.attrs["clock_offset_s"] = clocks.offset_s;
    ctx.attrs["clock_error_s"] = clocks.error_s;
  }
  results::sync_from_root(ctx, world);
  Reporters out = open_reporters(rank, opt, claim, ctx);
  results::sync_from_root(ctx, world);  // the run id, made unique in the file by rank 0
  setup_scope.reset();
  results::set_stop_site(opt.output, ctx.run_id);  // what a stuck run's signal watcher marks
  if (watched) {
    site = {rank, comm::host_name(), binary, plan.dim, opt.op_timeout, opt.output, ctx.run_id};
    start_watch(watch, site);
  }
  out.each([&](results::Reporter& r) { r.begin_run(ctx, plan.all_groups); });
  comm::agree_on_fault(world, out.write_error);
  if (rank == 0 && !opt.quiet) print_notes(spec, opt, plan, work.skipped);

  Buffers bufs = make_buffers(spec, opt, work, plan.group_size, comm->rank());
  Runner runner(spec, opt, *comm, world, plan, watched);
  runner.set_clock(clocks.mine, clocks.max_error_s);
  Sweep sweep{spec, opt, plan, *comm, runner, bufs};
  SweepEnd end = run_sweep(sweep, work, out, world, rank, watched);
  results::stop_finishing();
  if (opt.timing == Timing::kWindow) report_clock_drift(world, size, clock_t0, clocks, watched, out);
  out.each([&](results::Reporter& r) { r.finish(end.status); });
  comm::agree_on_fault(world, out.write_error);
  watch.stop();
  if (rank == 0) print_end(opt, end.status, ctx.run_id);
  out.list.clear();
  comm.reset();
  release_groups(plan);
  return exit_code(end, rank, binary);
}

}  // namespace

int run(const Spec& spec, int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm world;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  core::set_fault_identity(rank, comm::host_name());
  // SIGTERM, SIGINT, SIGHUP: stop at the next size (results/stop_signal.hpp)
  results::install_stop_signals(rank, comm::host_name(), fs::path(argv[0]).filename().string());
  comm::open_peer_board(MPI_COMM_WORLD);  // what a hang report reads to name the ranks that never arrived

  int rc = 0;
  try {
    rc = run_impl(spec, argc, argv, world);
  } catch (const UsageError& e) {
    if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", fs::path(argv[0]).filename().c_str(), e.what());
    rc = static_cast<int>(core::ExitCode::kUsage);
  } catch (const core::OutputFault& e) {
    // Every rank agreed to stop here (comm::agree_on_fault): no one waits in a collective.
    if (rank == 0)
      std::fprintf(stderr, "%s: error: %s\n", fs::path(argv[0]).filename().c_str(), e.what());
    rc = static_cast<int>(core::ExitCode::kRuntime);
  } catch (const core::RuntimeFault& e) {
    core::fatal_runtime("run", "world", e.what());
  } catch (const std::bad_alloc&) {
    core::fatal_runtime("buffer allocation", "world", "out of memory (lower -e/--max-bytes)");
  }
  results::stop_done();
  MPI_Comm_free(&world);
  // Results are on disk by now. MPICH 4.0 over UCX TCP can hang in MPI_Finalize (fixed
  // upstream in 4.2); do not let that turn a finished run into a job that never ends.
  if (results::stop_signal() != 0 && rc == static_cast<int>(core::ExitCode::kRuntime))
    comm::end_signalled_job(rank, rc, fs::path(argv[0]).filename().c_str());
  comm::finalize_with_deadline(rank, rc, fs::path(argv[0]).filename().c_str());
  return rc;
}

}  // namespace meshbench::collectives
