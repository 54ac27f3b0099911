#include "metrics.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>

namespace meshbench::parallel {

namespace {
std::vector<Interval> merged(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& x, const Interval& y) { return x.a < y.a; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (i.b <= i.a) continue;
    if (!out.empty() && i.a <= out.back().b)
      out.back().b = std::max(out.back().b, i.b);
    else
      out.push_back(i);
  }
  return out;
}

template <size_t N>
void put(char (&dst)[N], const std::string& s) {
  std::memset(dst, 0, N);
  std::memcpy(dst, s.data(), std::min(N - 1, s.size()));
}
// Adds a span to its phase's slot.
void add_phase(std::array<double, 4>& ph, const PhaseSpan& p) {
  for (size_t k = 0; k < kPhaseNames.size(); ++k)
    if (p.name == kPhaseNames[k]) ph[k] += p.t1 - p.t0;
}
}  // namespace

std::string comm_kind(const CommEvent& e) {
  if (e.p2p == 's') return "send";
  if (e.p2p == 'r') return "recv";
  return std::string(comm::name(e.kind));
}

std::array<double, 4> step_phases(const Trace& tr, int step) {
  std::array<double, 4> ph{};
  for (auto it = tr.phases.rbegin(); it != tr.phases.rend() && it->step == step; ++it) add_phase(ph, *it);
  return ph;
}

double union_length(std::vector<Interval> v) {
  double t = 0;
  for (const Interval& i : merged(std::move(v))) t += i.b - i.a;
  return t;
}

double uncovered_length(std::vector<Interval> v, std::vector<Interval> cover) {
  const std::vector<Interval> a = merged(std::move(v)), c = merged(std::move(cover));
  double t = 0;
  size_t j = 0;
  for (const Interval& i : a) {
    double pos = i.a;
    while (j < c.size() && c[j].b <= pos) ++j;
    for (size_t k = j; k < c.size() && c[k].a < i.b; ++k) {
      if (c[k].a > pos) t += c[k].a - pos;
      pos = std::max(pos, c[k].b);
      if (pos >= i.b) break;
    }
    if (pos < i.b) t += i.b - pos;
  }
  return t;
}

RankMetrics rank_metrics(const Trace& tr, int rank) {
  RankMetrics m;
  const size_t steps = tr.step_start.size();
  m.step_time.resize(steps);
  m.phases.assign(steps, {0, 0, 0, 0});
  for (size_t s = 0; s < steps; ++s) m.step_time[s] = tr.step_end[s] - tr.step_start[s];
  for (const PhaseSpan& p : tr.phases)
    if (p.step >= 0 && static_cast<size_t>(p.step) < steps) add_phase(m.phases[static_cast<size_t>(p.step)], p);
  // Per step: compute intervals, and each (dim, kind)'s call intervals.
  std::vector<std::vector<Interval>> compute(steps);
  for (const OpEvent& e : tr.ops)
    if (e.step >= 0 && static_cast<size_t>(e.step) < steps)
      compute[static_cast<size_t>(e.step)].push_back({e.t_start, e.t_end});
  std::map<std::pair<std::string, std::string>, CommRow> rows;
  std::map<std::pair<std::string, std::string>, std::vector<std::vector<Interval>>> busy;
  for (const CommEvent& e : tr.comms) {
    const auto key = std::make_pair(e.dim, comm_kind(e));
    CommRow& r = rows[key];
    r.rank = rank;
    put(r.dim, e.dim);
    put(r.kind, key.second);
    ++r.calls;
    r.bytes += e.bytes;
    r.wire_bytes += e.wire_bytes;
    auto& per_step = busy[key];
    per_step.resize(steps);
    if (e.tags.step >= 0 && static_cast<size_t>(e.tags.step) < steps)
      per_step[static_cast<size_t>(e.tags.step)].push_back({e.t_start, e.t_end});
  }
  for (auto& [key, r] : rows) {
    const auto& per_step = busy[key];
    for (size_t s = 0; s < steps; ++s) {
      r.busy_s += union_length(per_step[s]);
      r.exposed_s += uncovered_length(per_step[s], compute[s]);
    }
    m.comm.push_back(r);
  }
  return m;
}

std::vector<SendPost> send_posts(const Trace& tr, double offset) {
  std::vector<SendPost> v;
  for (const CommEvent& e : tr.comms)
    if (e.p2p == 's') v.push_back({e.tags.step, e.group, e.tag, e.t_post - offset});
  return v;
}

std::vector<Interval> pass_windows(const Trace& tr, double offset) {
  std::vector<Interval> w(tr.step_start.size(), Interval{1e300, -1e300});
  for (const PassSpan& p : tr.passes) {
    if (p.step < 0 || static_cast<size_t>(p.step) >= w.size()) continue;
    Interval& x = w[static_cast<size_t>(p.step)];
    if (p.phase == 'F') x.a = std::min(x.a, p.t0 - offset);
    if (p.phase == 'B') x.b = std::max(x.b, p.t1 - offset);
  }
  return w;
}

double bubble_theory(int P, int m, int V) {
  return double(P - 1) / (double(V) * m + P - 1);
}

PipelineRow pipeline_row(const Trace& tr, int rank, double offset, const std::vector<Interval>& span,
                         const std::vector<SendPost>& sends, double theory) {
  PipelineRow row;
  row.rank = rank;
  row.bubble_theory = theory;
  for (const SlotSample& s : tr.slots) {
    row.peak_held = std::max(row.peak_held, s.held);
    row.peak_activation_bytes = std::max(row.peak_activation_bytes, s.bytes);
  }
  std::map<std::tuple<int, int, int>, double> posted;
  for (const SendPost& p : sends) posted[{p.step, p.group, p.tag}] = p.t_post;
  const std::vector<Interval> own = pass_windows(tr, offset);
  const size_t steps = span.size();
  std::vector<std::vector<Interval>> compute(steps), transfer(steps);
  for (const PassSpan& p : tr.passes)
    if (p.step >= 0 && static_cast<size_t>(p.step) < steps)
      compute[static_cast<size_t>(p.step)].push_back({p.t0 - offset, p.t1 - offset});
  for (const CommEvent& e : tr.comms) {
    if (e.p2p != 'r' || e.tags.step < 0 || static_cast<size_t>(e.tags.step) >= steps) continue;
    const double post = e.t_post - offset, end = e.t_end - offset;
    auto it = posted.find({e.tags.step, e.group, e.tag});
    const double from = it == posted.end() ? post : std::clamp(it->second, post, end);
    row.recv_wait_s += from - post;
    row.recv_transfer_s += end - from;
    transfer[static_cast<size_t>(e.tags.step)].push_back({from, end});
  }
  for (size_t s = 0; s < steps; ++s) {
    const double len = span[s].b - span[s].a;
    if (!(len > 0)) continue;
    // idle: the part of the span (or of the rank's own window) that no pass covers
    const double exposed = uncovered_length(transfer[s], compute[s]);
    row.bubble += std::max(0.0, uncovered_length({span[s]}, compute[s]) - exposed) / len;
    if (own[s].b > own[s].a) row.bubble_window += std::max(0.0, uncovered_length({own[s]}, compute[s]) - exposed) / len;
  }
  const double n = steps > 0 ? double(steps) : 1.0;
  row.bubble /= n;
  row.bubble_window /= n;
  row.recv_wait_s /= n;
  row.recv_transfer_s /= n;
  return row;
}

}  // namespace meshbench::parallel
