#include "pipeline_parallel/schedule.hpp"

#include <algorithm>
#include <fmt/core.h>

#include "core/error.hpp"

namespace meshbench::parallel {

std::vector<Action> accumulation_schedule(int m) {
  std::vector<Action> a;
  for (int i = 0; i < m; ++i) {
    a.push_back({ActionKind::kForward, i, 0});
    a.push_back({ActionKind::kBackward, i, 0});
  }
  a.push_back({ActionKind::kGradSync, 0, 0});
  a.push_back({ActionKind::kOptimizer, 0, 0});
  return a;
}

namespace {
int group_of(const PipeShape& s) { return s.group > 0 ? s.group : s.stages; }
}  // namespace

std::string pipeline_rule_broken(PipeSchedule kind, const PipeShape& s) {
  const int P = s.stages, m = s.micro_batches, V = s.chunks, G = group_of(s);
  if (m < 1) return fmt::format("--micro-batches {}: must be at least 1", m);
  if (V < 1) return fmt::format("--vpp {}: must be at least 1", V);
  if (kind != PipeSchedule::kInterleaved) {
    if (V > 1) return fmt::format("--vpp {}: model chunks per rank need --schedule interleaved", V);
    return "";
  }
  if (P < 2) return "--schedule interleaved: needs a pipeline (--mesh pp=P with P >= 2)";
  if (G < P || G > m)
    return fmt::format("--schedule interleaved: the micro-batch group G = {} must satisfy P <= G <= m "
                       "(P = {}, m = --micro-batches {})", G, P, m);
  if (m % G != 0 && m % G < P)
    return fmt::format("--schedule interleaved: --micro-batches {} leaves a last group of m % G = {} "
                       "micro-batches (G = {}), which must be 0 or at least P = {}", m, m % G, G, P);
  return "";
}

std::vector<std::pair<int, int>> interleaved_table(int m, int V, int G) {
  std::vector<std::pair<int, int>> t;
  for (int lo = 0; lo < m; lo += G) {
    const int hi = lo + G >= m ? m : lo + G;  // a short last group runs whole: the rule keeps it >= P
    for (int c = 0; c < V; ++c)
      for (int i = lo; i < hi; ++i) t.emplace_back(i, c);
  }
  return t;
}

int warmup_forwards(PipeSchedule kind, const PipeShape& s, int r) {
  const int P = s.stages, m = s.micro_batches, V = s.chunks;
  switch (kind) {
    case PipeSchedule::kGpipe: return m * V;
    case PipeSchedule::k1F1B: return std::min(P - r - 1, m);
    case PipeSchedule::kInterleaved: return std::min(2 * (P - r - 1) + (V - 1) * group_of(s), V * m);
  }
  return 0;
}

std::vector<Action> pipeline_schedule(PipeSchedule kind, const PipeShape& s, int r) {
  const int P = s.stages, V = s.chunks;
  // The forward order of (micro-batch, chunk), and the backward order.
  std::vector<std::pair<int, int>> fwd, bwd;
  if (kind == PipeSchedule::kInterleaved) {
    fwd = interleaved_table(s.micro_batches, V, group_of(s));
    for (auto [i, c] : fwd) bwd.emplace_back(i, V - 1 - c);
  } else {
    for (int i = 0; i < s.micro_batches; ++i) fwd.emplace_back(i, 0);
    bwd = fwd;
  }
  const int n = static_cast<int>(fwd.size()), w = warmup_forwards(kind, s, r);
  const int last = V * P - 1;
  std::vector<Action> a;
  auto forward = [&](int k) {
    const auto [i, c] = fwd[static_cast<size_t>(k)];
    const int vs = c * P + r;
    if (vs > 0) a.push_back({ActionKind::kRecvActivation, i, c, (r + P - 1) % P});
    a.push_back({ActionKind::kForward, i, c});
    if (vs < last) a.push_back({ActionKind::kSendActivation, i, c, (r + 1) % P});
  };
  auto backward = [&](int k) {
    const auto [i, c] = bwd[static_cast<size_t>(k)];
    const int vs = c * P + r;
    if (vs < last) a.push_back({ActionKind::kRecvGradient, i, c, (r + 1) % P});
    a.push_back({ActionKind::kBackward, i, c});
    if (vs > 0) a.push_back({ActionKind::kSendGradient, i, c, (r + P - 1) % P});
  };
  for (int k = 0; k < w; ++k) forward(k);
  for (int k = 0; k < n - w; ++k) {
    forward(w + k);
    backward(k);
  }
  for (int k = n - w; k < n; ++k) backward(k);
  a.push_back({ActionKind::kGradSync, 0, 0});
  a.push_back({ActionKind::kOptimizer, 0, 0});
  return a;
}

int64_t scheduled_activation_peak(const std::vector<Action>& actions, const std::vector<int64_t>& slot_bytes) {
  int64_t held = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.kind == ActionKind::kForward) peak = std::max(peak, held += slot_bytes[static_cast<size_t>(a.chunk)]);
    if (a.kind == ActionKind::kBackward) held -= slot_bytes[static_cast<size_t>(a.chunk)];
  }
  return peak;
}

namespace {
std::string action_text(const Action& a) {
  const std::string c = a.chunk > 0 ? fmt::format("c{}", a.chunk) : std::string();
  switch (a.kind) {
    case ActionKind::kForward: return fmt::format("F{}{}", a.micro, c);
    case ActionKind::kBackward: return fmt::format("B{}{}", a.micro, c);
    case ActionKind::kGradSync: return "G";
    case ActionKind::kOptimizer: return "O";
    case ActionKind::kRecvActivation: return fmt::format("ra{}{}", a.micro, c);
    case ActionKind::kSendActivation: return fmt::format("sa{}{}", a.micro, c);
    case ActionKind::kRecvGradient: return fmt::format("rg{}{}", a.micro, c);
    case ActionKind::kSendGradient: return fmt::format("sg{}{}", a.micro, c);
  }
  return "?";
}
std::string joined(const std::vector<Action>& actions, bool compute_only) {
  std::string s;
  for (const Action& a : actions) {
    if (compute_only && a.kind != ActionKind::kForward && a.kind != ActionKind::kBackward) continue;
    if (!s.empty()) s += ' ';
    s += action_text(a);
  }
  return s;
}
}  // namespace

std::string to_string(const std::vector<Action>& actions) { return joined(actions, false); }
std::string compute_order(const std::vector<Action>& actions) { return joined(actions, true); }

}  // namespace meshbench::parallel
