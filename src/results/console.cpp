// Console tables in nccl-tests' shape, printed by rank 0.
#include <fmt/core.h>

#include <cstdio>

#include "results/reporter.hpp"

namespace meshbench::results {
namespace {

std::string time_us(double s) {
  double us = s * 1e6;
  return us < 1e5 ? fmt::format("{:8.2f}", us) : fmt::format("{:8.0f}", us);
}

// Warm-up calls made, with '!' when adaptive warm-up gave up before the time was stable.
std::string warm_col(const PointResult& p) {
  return std::to_string(p.warmup_calls) + (p.warmup_converged == 0 ? "!" : "");
}

std::string point_cols(const PointResult& p, bool measured) {
  if (!measured || !p.ran) return fmt::format("  {:>8}  {:>6}  {:>6}  {:>6}  {:>5}  {:>5}", "n/a", "", "", "", "", "");
  return fmt::format("  {}  {:6.2f}  {:6.2f}  {:>6}  {:>5}  {:>5}", time_us(p.t_median), p.algbw, p.busbw, p.wrong,
                     p.iters, warm_col(p));
}

const char* stat_words(const std::string& stat) {
  if (stat == "avg") return "the average over ranks (OSU's statistic)";
  if (stat == "min") return "the fastest rank";
  if (stat == "rank0") return "rank 0";
  return "the slowest rank";
}

void emit(const std::string& s) {
  std::fputs(s.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace

std::string ConsoleReporter::format_header(const Block& b) {
  std::string s;
  s += fmt::format("#{:46}{:^48}{:^48}\n", "", "out-of-place", "in-place");
  std::string cols = "  {:>8}  {:>6}  {:>6}  {:>6}  {:>5}  {:>5}";
  std::string line = "#{:>11}  {:>12}  {:>6}  {:>5}  {:>4}" + cols + cols + "\n";
  s += fmt::format(fmt::runtime(line), "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                   "iters", "warm", "time", "algbw", "busbw", "#wrong", "iters", "warm");
  s += fmt::format(fmt::runtime(line), "(B)", "(" + b.count_unit + ")", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "", "(calls)",
                   "(us)", "(GB/s)", "(GB/s)", "", "", "(calls)");
  return s;
}

std::string ConsoleReporter::format_row(const Block& b, const Row& r) {
  std::string s = fmt::format("{:>12}  {:>12}  {:>6}  {:>5}  {:>4}", r.sizes.bytes, r.sizes.count, b.dtype,
                              b.redop, b.root);
  s += point_cols(r.by_placement[0], b.runs[0]);
  s += point_cols(r.by_placement[1], b.runs[1]);
  return s + "\n";
}

void ConsoleReporter::begin_run(const RunContext& ctx, const std::vector<GroupInfo>& groups) {
  if (rank_ != 0 || quiet_) return;
  const auto& a = ctx.attrs;
  std::string s;
  s += fmt::format("# meshbench {} {} (git {}), run {}\n", a.value("binary", ""), suite_version(), git_sha(),
                   ctx.run_id);
  bool over = a.value("oversubscribed", false);
  s += fmt::format("# backend {}, mem {}, {} ranks on {} node{}{} ({} per node, {} cores per node), "
                   "oversubscribed: {}\n",
                   a.value("backend", "?"), a.value("mem", "?"), a.value("world_size", 0), a.value("nodes", 0),
                   a.value("nodes", 0) == 1 ? "" : "s", a.value("nodes_emulated", false) ? " (emulated)" : "",
                   a.value("ranks_per_node", 0), a.value("cores_per_node", 0),
                   over ? "YES: more ranks than cores, timings are not meaningful" : "no");
  s += fmt::format("# mpi: {}", a.value("mpi_library", "?"));
  if (a.value("nccl_version", "none") != "none") s += fmt::format(", nccl {}", a.value("nccl_version", ""));
  s += "\n";
  std::string timing = a.value("timing", "");
  std::string iters = a.value("iters_fixed", true)
                          ? fmt::format("{} (fixed)", a.value("iters", 0))
                          : fmt::format("at least {} and at least {:g} s of calls per size (at most {})",
                                        a.value("iters", 0), a.value("min_time", 0.0), a.value("max_iters", 0));
  int warm = a.value("warmup", 0);
  std::string warmup = warm >= 0 ? fmt::format("{} calls (fixed)", warm)
                                 : fmt::format("auto (until the median of 10 calls is within {:g}% of the previous "
                                               "10's; at least 100 calls or {:g} s, at most {} calls or {:g} s)",
                                               100 * a.value("warmup_tolerance", 0.0),
                                               a.value("warmup_time", 0.0) / 4, a.value("warmup_max", 0),
                                               a.value("warmup_time", 0.0));
  s += fmt::format("# timing {} ({}), check {}\n", timing,
                   timing == "pipelined" ? "back-to-back calls, each timed between consecutive marks"
                   : timing == "window"  ? "each call starts at a scheduled time on clocks synchronised to rank 0, "
                                           "timed to local completion"
                                         : "barrier before each call, excluded from the time",
                   a.value("check", 0) ? "on" : "off");
  s += fmt::format("# iters {}\n# warm-up {}\n", iters, warmup);
  rank_stat_ = a.value("rank_stat", "max");
  std::string dim = a.value("group_dim", "world");
  if (dim != "world") {
    if (a.contains("mesh") && !a["mesh"].empty()) s += fmt::format("# mesh {} order {}\n", a["mesh"].dump(), a.value("order", ""));
    for (const auto& g : groups) {
      if (g.dim != dim) continue;
      std::string list;
      for (std::size_t i = 0; i < g.ranks.size(); ++i) {
        if (i) list += ',';  // two appends: GCC 12 warns (-Wrestrict, falsely) on "," + string
        list += std::to_string(g.ranks[i]);
      }
      s += fmt::format("# group {}#{}: ranks {} ({} node{}, {}-node)\n", g.dim, g.id, list, g.nodes_spanned,
                       g.nodes_spanned == 1 ? "" : "s", g.span);
    }
  }
  if (!a.value("tag", "").empty()) s += fmt::format("# tag {}\n", a.value("tag", ""));
  s += fmt::format("# time: median over iterations of {} (--rank-stat {}); algbw = size / time; "
                   "busbw = algbw x factor; warm: warm-up calls, ! = not stable at the cap\n",
                   stat_words(rank_stat_), rank_stat_);
  emit(s);
}

void ConsoleReporter::begin_block(const Block& b) {
  if (rank_ != 0 || quiet_) return;
  std::string what = b.redop == "none" ? b.dtype : b.dtype + " " + b.redop;
  std::string s = fmt::format("#\n# {} {}: group {} of {} ranks, busbw factor {:.4g}\n", b.collective, what, b.group,
                              b.group_size, b.bus_factor);
  for (int p = 0; p < 2; ++p)
    if (!b.runs[static_cast<size_t>(p)] && !b.why_not[static_cast<size_t>(p)].empty())
      s += fmt::format("# {} not measured: {}\n", name(static_cast<Placement>(p)),
                       b.why_not[static_cast<size_t>(p)]);
  emit(s + format_header(b));
}

void ConsoleReporter::row(const Block& b, const Row& r) {
  for (int p = 0; p < 2; ++p) {
    const auto& pt = r.by_placement[static_cast<size_t>(p)];
    if (!pt.ran) continue;
    wrong_total_ += pt.wrong;
    invalid_ += pt.invalid;
    timed_ += pt.iters;
    if (pt.warmup_converged == 0)
      not_converged_.push_back(fmt::format("{} {} B {}", b.collective, r.sizes.bytes, name(static_cast<Placement>(p))));
    if (pt.busbw > best_busbw_) {
      best_busbw_ = pt.busbw;
      best_bytes_ = r.sizes.bytes;
      best_what_ = fmt::format("{} {} {}", b.collective, b.dtype, name(static_cast<Placement>(p)));
    }
  }
  if (rank_ != 0 || quiet_) return;
  emit(format_row(b, r));
}

void ConsoleReporter::end_block(const Block&) {}

void ConsoleReporter::finish(RunStatus s) {
  if (rank_ != 0) return;
  std::string out;
  if (!quiet_ && best_busbw_ > 0)
    out += fmt::format("# peak busbw {:.2f} GB/s ({} at {} B)\n", best_busbw_, best_what_, best_bytes_);
  if (invalid_ > 0)
    out += fmt::format("# window timing: {} of {} timed calls dropped for a late start on some rank ({:.1f}%)\n",
                       invalid_, invalid_ + timed_, 100.0 * static_cast<double>(invalid_) /
                                                       static_cast<double>(invalid_ + timed_));
  if (!not_converged_.empty()) {
    out += fmt::format("# warm-up not converged at {} point{} (the time per call was still changing at the cap; "
                       "raise --warmup-time or --warmup-max):",
                       not_converged_.size(), not_converged_.size() == 1 ? "" : "s");
    for (std::size_t i = 0; i < not_converged_.size() && i < 8; ++i) {
      out += i ? ", " : " ";
      out += not_converged_[i];
    }
    out += not_converged_.size() > 8 ? ", ...\n" : "\n";
  }
  out += fmt::format("# wrong elements: {}  status: {}\n", wrong_total_, name(s));
  emit(out);
}

}  // namespace meshbench::results
