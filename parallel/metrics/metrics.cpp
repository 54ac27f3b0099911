#include "metrics/metrics.hpp"

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

double TimeSplit::exposed_total() const {
  double t = 0;
  for (const auto& [dim, v] : exposed) t += v;
  return t;
}

std::vector<SplitRow> split_rows(const TimeSplit& s, int rank) {
  std::vector<SplitRow> rows;
  auto add = [&](const std::string& name, double v) {
    SplitRow r;
    r.rank = rank;
    put(r.category, name);
    r.seconds = v;
    rows.push_back(r);
  };
  add("step", s.step);
  add("compute", s.compute);
  for (const auto& [dim, v] : s.exposed) add("exposed." + dim, v);
  add("bubble", s.bubble);
  add("other", s.other);
  return rows;
}

std::vector<P2pPost> p2p_posts(const Trace& tr, double offset) {
  std::vector<P2pPost> v;
  for (const CommEvent& e : tr.comms)
    if (e.p2p != 0) v.push_back({e.tags.step, e.group, e.tag, e.p2p, e.t_post - offset});
  return v;
}

namespace {

// One blocked stretch of a call: [a, b] on this rank's clock, charged to the bubble
// (row < 0) or to comm row `row`'s exposed time.
struct Blocked {
  double a, b;
  int row;
};

// Charges every instant of `window` once (metrics.hpp): compute, else the blocked stretches
// covering it (1/k each), else other. Adds to `split` and to each row's exposed seconds.
void charge_step(Interval window, std::vector<Interval> compute, const std::vector<Blocked>& blocked,
                 std::vector<double>& row_exposed, const std::vector<std::string>& row_dim, TimeSplit& split) {
  const std::vector<Interval> c = merged(std::move(compute));
  std::vector<double> x{window.a, window.b};
  for (const Interval& i : c) {
    x.push_back(i.a);
    x.push_back(i.b);
  }
  // Stretch events, sorted by time; at one time an end sorts before a start.
  std::vector<std::pair<double, int>> ev;  // (t, +id+1 start / -(id+1) end)
  for (size_t k = 0; k < blocked.size(); ++k) {
    if (!(blocked[k].b > blocked[k].a)) continue;
    ev.emplace_back(blocked[k].a, int(k) + 1);
    ev.emplace_back(blocked[k].b, -(int(k) + 1));
    x.push_back(blocked[k].a);
    x.push_back(blocked[k].b);
  }
  std::sort(ev.begin(), ev.end());
  std::sort(x.begin(), x.end());
  x.erase(std::unique(x.begin(), x.end()), x.end());
  std::vector<int> active;
  size_t e = 0, j = 0;
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    const double lo = x[i], hi = x[i + 1];
    for (; e < ev.size() && ev[e].first <= lo; ++e) {
      if (ev[e].second > 0) active.push_back(ev[e].second - 1);
      else active.erase(std::find(active.begin(), active.end(), -ev[e].second - 1));
    }
    if (lo < window.a || hi > window.b) continue;  // outside this rank's step
    const double len = hi - lo;
    while (j < c.size() && c[j].b <= lo) ++j;
    if (j < c.size() && c[j].a <= lo) {
      split.compute += len;
    } else if (active.empty()) {
      split.other += len;
    } else {
      const double share = len / double(active.size());
      for (int k : active) {
        const int row = blocked[static_cast<size_t>(k)].row;
        if (row < 0) {
          split.bubble += share;
        } else {
          row_exposed[static_cast<size_t>(row)] += share;
          split.exposed[row_dim[static_cast<size_t>(row)]] += share;
        }
      }
    }
  }
  split.step += window.b - window.a;
}

}  // namespace

RankMetrics rank_metrics(const Trace& tr, int rank, double offset, const std::vector<P2pPost>& posts) {
  RankMetrics m;
  const size_t steps = tr.step_start.size();
  m.step_time.resize(steps);
  m.phases.assign(steps, {0, 0, 0, 0});
  for (size_t s = 0; s < steps; ++s) m.step_time[s] = tr.step_end[s] - tr.step_start[s];
  for (const PhaseSpan& p : tr.phases)
    if (p.step >= 0 && static_cast<size_t>(p.step) < steps) add_phase(m.phases[static_cast<size_t>(p.step)], p);
  // Per step: compute intervals, each (dim, kind)'s call intervals, and the blocked stretches.
  std::vector<std::vector<Interval>> compute(steps);
  for (const OpEvent& e : tr.ops)
    if (e.step >= 0 && static_cast<size_t>(e.step) < steps)
      compute[static_cast<size_t>(e.step)].push_back({e.t_start, e.t_end});
  // The peer's post of each pipeline call, on this rank's clock.
  std::map<std::tuple<int, int, int, char>, double> peer_post;
  for (const P2pPost& p : posts) peer_post[{p.step, p.group, p.tag, p.dir}] = p.t_post + offset;
  std::map<std::pair<std::string, std::string>, int> index;
  std::vector<CommRow> rows;
  std::vector<std::string> row_dim;
  std::vector<std::vector<std::vector<Interval>>> busy;  // [row][step]
  std::vector<std::vector<Blocked>> blocked(steps);
  for (const CommEvent& e : tr.comms) {
    const auto key = std::make_pair(e.dim, comm_kind(e));
    auto [it, fresh] = index.try_emplace(key, static_cast<int>(rows.size()));
    if (fresh) {
      CommRow r;
      r.rank = rank;
      put(r.dim, e.dim);
      put(r.kind, key.second);
      rows.push_back(r);
      row_dim.push_back(e.dim);
      busy.emplace_back(steps);
    }
    const int row = it->second;
    CommRow& r = rows[static_cast<size_t>(row)];
    ++r.calls;
    r.bytes += e.bytes;
    r.wire_bytes += e.wire_bytes;
    if (e.tags.step < 0 || static_cast<size_t>(e.tags.step) >= steps) continue;
    const size_t s = static_cast<size_t>(e.tags.step);
    busy[static_cast<size_t>(row)][s].push_back({e.t_start, e.t_end});
    // The stretches the rank stood still on this call: posting it (a posted call) and waiting
    // for it; a pipeline call's part before its peer posted the match is the bubble.
    const double peer = [&] {
      if (e.p2p == 0) return -1e300;
      const auto p = peer_post.find({e.tags.step, e.group, e.tag, e.p2p == 's' ? 'r' : 's'});
      return p == peer_post.end() ? -1e300 : p->second;
    }();
    auto stretch = [&](double a, double b) {
      if (!(b > a)) return;
      const double from = std::clamp(peer, a, b);
      if (from > a) blocked[s].push_back({a, from, -1});
      blocked[s].push_back({from, b, row});
    };
    if (!e.blocking) stretch(e.t_post, e.t_posted);
    stretch(e.t_wait, e.t_end);
  }
  std::vector<double> exposed(rows.size(), 0.0);
  for (size_t s = 0; s < steps; ++s)
    charge_step({tr.step_start[s], tr.step_end[s]}, compute[s], blocked[s], exposed, row_dim, m.split);
  for (size_t k = 0; k < rows.size(); ++k) {
    for (size_t s = 0; s < steps; ++s) rows[k].busy_s += union_length(busy[k][s]);
    rows[k].exposed_s = exposed[k];
    m.comm.push_back(rows[k]);
  }
  if (steps > 0) {  // means per step
    const double n = double(steps);
    m.split.step /= n;
    m.split.compute /= n;
    m.split.bubble /= n;
    m.split.other /= n;
    for (auto& [dim, v] : m.split.exposed) v /= n;
  }
  return m;
}

PipelineRow pipeline_row(const Trace& tr, int rank, double offset, const TimeSplit& split,
                         const std::vector<P2pPost>& posts, double theory) {
  PipelineRow row;
  row.rank = rank;
  row.bubble_theory = theory;
  for (const SlotSample& s : tr.slots) {
    row.peak_held = std::max(row.peak_held, s.held);
    row.peak_activation_bytes = std::max(row.peak_activation_bytes, s.bytes);
  }
  row.bubble = split.step > 0 ? split.bubble / split.step : 0.0;
  std::map<std::tuple<int, int, int>, double> sent;
  for (const P2pPost& p : posts)
    if (p.dir == 's') sent[{p.step, p.group, p.tag}] = p.t_post;
  const size_t steps = tr.step_start.size();
  for (const CommEvent& e : tr.comms) {
    if (e.p2p != 'r' || e.tags.step < 0 || static_cast<size_t>(e.tags.step) >= steps) continue;
    const double post = e.t_post - offset, end = e.t_end - offset;
    auto it = sent.find({e.tags.step, e.group, e.tag});
    const double from = it == sent.end() ? post : std::clamp(it->second, post, end);
    row.recv_wait_s += from - post;
    row.recv_transfer_s += end - from;
  }
  const double n = steps > 0 ? double(steps) : 1.0;
  row.recv_wait_s /= n;
  row.recv_transfer_s /= n;
  return row;
}

}  // namespace meshbench::parallel
