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

std::string point_cols(const PointResult& p, bool measured) {
  if (!measured || !p.ran) return fmt::format("  {:>8}  {:>6}  {:>6}  {:>6}", "n/a", "", "", "");
  return fmt::format("  {}  {:6.2f}  {:6.2f}  {:>6}", time_us(p.t_median), p.algbw, p.busbw, p.wrong);
}

void emit(const std::string& s) {
  std::fputs(s.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace

std::string ConsoleReporter::format_header(const Block&) {
  std::string s;
  s += fmt::format("#{:46}{:^34}{:^34}\n", "", "out-of-place", "in-place");
  s += fmt::format("#{:>11}  {:>12}  {:>6}  {:>5}  {:>4}  {:>8}  {:>6}  {:>6}  {:>6}  {:>8}  {:>6}  {:>6}  {:>6}\n",
                   "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                   "busbw", "#wrong");
  s += fmt::format("#{:>11}  {:>12}  {:>6}  {:>5}  {:>4}  {:>8}  {:>6}  {:>6}  {:>6}  {:>8}  {:>6}  {:>6}  {:>6}\n",
                   "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
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
  s += fmt::format("# timing {} ({}), iters {}, warmup {}, check {}\n", timing,
                   timing == "pipelined" ? "back-to-back calls, each timed between consecutive marks"
                                         : "barrier before each call, excluded from the time",
                   a.value("iters", 0), a.value("warmup", 0), a.value("check", 0) ? "on" : "off");
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
  s += "# time: median over iterations of the slowest rank; algbw = size / time; busbw = algbw x factor\n";
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
  out += fmt::format("# wrong elements: {}  status: {}\n", wrong_total_, name(s));
  emit(out);
}

}  // namespace meshbench::results
