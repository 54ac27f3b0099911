// The items of one pass read off the model's own wiring: Gpt<float>'s forward or backward of a
// model chunk run over ShapeBackend (kernels/backend_shape.hpp: no arithmetic, nothing committed)
// with recording groups in place of the tp, cp, ep and etp communicators, and for ZeRO-3 a
// recording residency in place of the strategy's. Every op the model times becomes an item
// (its kind, part, GEMM shape; FLOPs for GEMMs and attention, the elements it wrote otherwise),
// every group call an item (its dimension, collective, payload, group size) where the model
// waits on it, every unit it acquires under ZeRO-3 a gather and every unit it releases after a
// backward a reduce-scatter. The groups behave as if every rank of a group held what this one
// does (an all-to-all hands back this rank's own block from every peer, an all-reduce sums
// `size` copies): only the values the host reads (MoE counts) are exchanged, from the routing
// workload's expected pairs per expert (routing_pairs), so the recorded rank is the busiest.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "context_parallel/attention.hpp"
#include "core/routing.hpp"
#include "kernels/backend_shape.hpp"
#include "model/model.hpp"
#include "predict/op_list.hpp"

namespace meshbench::parallel {
namespace {

using S = float;
static_assert(sizeof(S) == kItemScalarBytes);

// Integer pairs per expert from real-valued targets: floors, then the remainder one by one to
// the largest fractions, then to any expert with room (each at most N), summing to N k.
std::vector<int> integer_pairs(const std::vector<double>& t, int N, int k) {
  const int E = static_cast<int>(t.size());
  std::vector<int> c(static_cast<size_t>(E));
  int64_t sum = 0;
  for (int e = 0; e < E; ++e) sum += c[size_t(e)] = std::clamp(static_cast<int>(std::floor(t[size_t(e)])), 0, N);
  std::vector<int> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return t[size_t(a)] - std::floor(t[size_t(a)]) > t[size_t(b)] - std::floor(t[size_t(b)]);
  });
  int64_t rem = int64_t{N} * k - sum;
  for (int e : order)
    if (rem > 0 && t[size_t(e)] > std::floor(t[size_t(e)]) && c[size_t(e)] < N) ++c[size_t(e)], --rem;
  for (int e = E - 1; rem > 0; e = e == 0 ? E - 1 : e - 1)
    if (c[size_t(e)] < N) ++c[size_t(e)], --rem;
  return c;
}

// The expected token-expert pairs per expert of one token holder's N tokens under the plan's
// routing workload (core/routing.hpp), placed so that EP rank 0 holds the busiest experts:
// balanced (and learned, assumed balanced) spreads them evenly; hot-expert and rotating send
// kHotShare N tokens to expert 0 and the rest evenly over the others; hot-rank sends kHotShare N
// tokens' choices to rank 0's first min(k, E/ep) experts; zipf:S gives expert e min(1, k w_e /
// sum w) N, w_e = 1/(e+1)^S.
ShapeBackend<S>::Pairs routing_pairs(const Plan& plan) {
  const core::Routing r = plan.routing;
  const int ep = std::max(1, plan.degrees.ep);
  return [r, ep](int N, int E, int k) {
    const double h = std::round(core::kHotShare * N), nk = double(N) * k;
    std::vector<double> t(static_cast<size_t>(E), nk / E);
    switch (r.mode) {
      case core::RoutingMode::kHotExpert:
      case core::RoutingMode::kRotating:
        if (E > 1) t.assign(size_t(E), (nk - h) / (E - 1)), t[0] = h;
        break;
      case core::RoutingMode::kHotRank: {
        const int hot = std::min(k, E / ep);
        t.assign(size_t(E), (nk - h * hot) / E);
        for (int e = 0; e < hot; ++e) t[size_t(e)] += h;
        break;
      }
      case core::RoutingMode::kZipf: {
        double sum = 0;
        for (int e = 0; e < E; ++e) sum += 1.0 / std::pow(e + 1.0, r.zipf_s);
        for (int e = 0; e < E; ++e) t[size_t(e)] = std::min(1.0, k / std::pow(e + 1.0, r.zipf_s) / sum) * N;
        break;
      }
      default: break;
    }
    return integer_pairs(t, N, k);
  };
}

// What one pass records, in the order the model runs it.
class Recorder {
 public:
  Recorder(ShapeBackend<S>& be, char pass) : be_(be), pass_(pass) {}
  std::vector<PassItem> items;
  std::vector<OpEvent> events;  // the model's trace sink
  bool on = false;              // recording (a backward's forward runs first, unrecorded)
  const Gpt<S>* model = nullptr;

  // Gpt's poll after every timed op: the op just traced becomes an item.
  void after_op() {
    for (; seen_ < events.size(); ++seen_) {
      const OpEvent& e = events[seen_];
      const double elements = be_.take_elements();
      if (!on) continue;
      PassItem it;
      it.op = e.op;
      it.part = e.part;
      it.phase = e.phase;
      it.m = e.m, it.n = e.n, it.k = e.k;
      it.units = e.flops > 0 ? e.flops : elements;
      it.recompute = pass_ == 'B' && e.phase == 'F';
      items.push_back(std::move(it));
    }
  }
  // Returns whether it made an item (recording, a group of more than one).
  bool call(const char* dim, const char* collective, uint64_t bytes, int group) {
    be_.take_elements();  // memory calls between ops belong to no op
    if (!on || group <= 1) return false;
    PassItem it;
    it.comm = true;
    it.phase = model->trace_phase();
    it.recompute = pass_ == 'B' && it.phase == 'F';
    it.dim = dim;
    it.collective = collective;
    it.bytes = bytes;
    it.group = group;
    items.push_back(std::move(it));
    return true;
  }
  void ready(int64_t lo) {
    if (on && !items.empty()) items.back().ready_from = lo;
  }

 private:
  ShapeBackend<S>& be_;
  char pass_;
  size_t seen_ = 0;
};

// A group of `size` ranks as the model sees it, recording each call (posted ones at their wait)
// and exchanging the values the host reads as if every rank held this one's.
class RecordingGroup final : public GroupComm<S> {
 public:
  RecordingGroup(Recorder& rec, ShapeBackend<S>& be, const char* dim, int size, int rank)
      : rec_(rec), be_(be), dim_(dim), size_(size), rank_(rank) {}
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void set_layer(int) override {}
  void all_reduce(S* x, int64_t n) override {
    sum(x, n);
    rec_.call(dim_, "all_reduce", bytes(n), size_);
  }
  void all_reduce_max(S*, int64_t n) override { rec_.call(dim_, "all_reduce", bytes(n), size_); }
  void all_gather(S* full, const S* part, int64_t n) override {
    gather(full, part, n);
    rec_.call(dim_, "all_gather", bytes(n * size_), size_);
  }
  void reduce_scatter(S* part, const S* full, int64_t n) override {
    scatter(part, full, n);
    rec_.call(dim_, "reduce_scatter", bytes(n * size_), size_);
  }
  void all_to_all(S* recv, const S* send, int64_t n) override {
    if (holds(send, n * size_))  // peer q sends me its block rank_: this rank's own
      for (int q = 0; q < size_; ++q) copy(recv + q * n, send + int64_t{rank_} * n, n);
    rec_.call(dim_, "all_to_all", bytes(n * size_), size_);
  }
  // Timed at the larger of what this rank sends and what it receives (the busiest rank's
  // dispatch receives more than it sends).
  void all_to_allv(S*, const std::vector<int64_t>& recv_n, const S*, const std::vector<int64_t>& send_n) override {
    const int64_t r = std::accumulate(recv_n.begin(), recv_n.end(), int64_t{0});
    const int64_t s = std::accumulate(send_n.begin(), send_n.end(), int64_t{0});
    rec_.call(dim_, "all_to_allv", bytes(std::max(r, s)), size_);
  }
  int post_all_reduce(S* x, int64_t n) override {
    sum(x, n);
    return keep("all_reduce", bytes(n));
  }
  int post_all_gather(S* full, const S* part, int64_t n) override {
    gather(full, part, n);
    return keep("all_gather", bytes(n * size_));
  }
  int post_reduce_scatter(S* part, const S* full, int64_t n) override {
    scatter(part, full, n);
    return keep("reduce_scatter", bytes(n * size_));
  }
  int post_exchange(const S* send, int, S* recv, int, int64_t n) override {
    if (holds(send, n)) copy(recv, send, n);
    return keep("sendrecv", bytes(n));
  }
  void wait(int handle) override {
    if (handle < 0 || size_t(handle) >= posted_.size() || posted_[size_t(handle)].first == nullptr) return;
    auto& [collective, b] = posted_[size_t(handle)];
    rec_.call(dim_, collective, b, size_);
    collective = nullptr;
  }

 private:
  static uint64_t bytes(int64_t n) { return uint64_t(n) * kItemScalarBytes; }
  bool holds(const S* p, int64_t n) const { return be_.holds_data(p, sizeof(S) * size_t(n)); }
  void copy(S* dst, const S* src, int64_t n) {
    std::memmove(dst, src, sizeof(S) * size_t(n));
    be_.mark(dst, sizeof(S) * size_t(n));
  }
  void sum(S* x, int64_t n) {  // size_ copies of this rank's values
    if (holds(x, n))
      for (int64_t i = 0; i < n; ++i) x[i] *= static_cast<S>(size_);
  }
  void gather(S* full, const S* part, int64_t n) {
    if (holds(part, n))
      for (int q = 0; q < size_; ++q) copy(full + q * n, part, n);
  }
  void scatter(S* part, const S* full, int64_t n) {
    if (!holds(full + int64_t{rank_} * n, n)) return;
    for (int64_t i = 0; i < n; ++i) part[i] = full[int64_t{rank_} * n + i] * static_cast<S>(size_);
    be_.mark(part, sizeof(S) * size_t(n));
  }
  int keep(const char* collective, uint64_t b) {
    posted_.emplace_back(collective, b);
    return static_cast<int>(posted_.size()) - 1;
  }
  Recorder& rec_;
  ShapeBackend<S>& be_;
  const char* dim_;
  int size_, rank_;
  std::vector<std::pair<const char*, uint64_t>> posted_;
};

// ZeRO's residency as the pass sees it: the units' buffers (never written), and under ZeRO-3
// (`calls`) a gather where the model acquires a unit it does not hold, a reduce-scatter where
// it releases one after a backward. Gathered units are kept across micro-batches with
// --zero3-keep-params: gathered in the step's first forward only.
class RecordingResidency final : public Residency<S> {
 public:
  RecordingResidency(Recorder& rec, ShapeBackend<S>& be, const std::vector<Unit>& units, bool calls, int group,
                     bool kept)
      : rec_(rec), units_(units), calls_(calls), group_(group), kept_(kept), held_(units.size(), 0) {
    for (const Unit& u : units) buf_.emplace_back(be, 2 * (u.hi - u.lo));
  }
  void acquire(int u, char phase) override {
    (void)phase;
    if (held_[size_t(u)]++ > 0 || !calls_ || kept_) return;
    if (rec_.call("dp", "all_gather", bytes(u), group_)) gathers.push_back(rec_.items.size() - 1);
  }
  void release(int u, char phase) override {
    if (--held_[size_t(u)] > 0 || !calls_ || phase != 'B') return;
    if (rec_.call("dp", "reduce_scatter", bytes(u), group_)) scatters.push_back(rec_.items.size() - 1);
  }
  S* params(int u) override { return buf_[size_t(u)].data(); }
  S* grads(int u) override { return buf_[size_t(u)].data() + (units_[size_t(u)].hi - units_[size_t(u)].lo); }
  std::vector<size_t> gathers, scatters;  // the items they made

 private:
  uint64_t bytes(int u) const { return uint64_t(units_[size_t(u)].hi - units_[size_t(u)].lo) * kItemScalarBytes; }
  Recorder& rec_;
  const std::vector<Unit>& units_;
  bool calls_;
  int group_;
  bool kept_;
  std::vector<int> held_;
  std::vector<BackendArray<S, S>> buf_;
};

// The cp rank that computes the most (query chunk, key chunk) pairs: zig-zag's are alike, a
// contiguous split's last rank sees the whole sequence.
int busiest_cp_rank(const GptConfig& c, const CpSpec& cp) {
  int best = 0, most = -1;
  for (int r = 0; r < cp.size; ++r) {
    const CpChunks mine = cp_chunks(c.seq, cp, r);
    int n = 0;
    for (int j = 0; j < cp.size; ++j) {
      const CpChunks theirs = cp_chunks(c.seq, cp, j);
      for (int a = 0; a < mine.count; ++a)
        for (int k = 0; k < theirs.count; ++k) n += cp_pair_sees(mine, a, theirs, k) ? 1 : 0;
    }
    if (n > most) most = n, best = r;
  }
  return best;
}

// The model's groups (tp, cp at the recorded cp rank, ep and etp at rank 0) and, for a model
// whose parameters or gradients a strategy holds (ZeRO), the recording residency.
struct Rig {
  std::vector<std::unique_ptr<RecordingGroup>> groups;
  std::unique_ptr<RecordingResidency> res;
};
Rig rig(Gpt<S>& model, Recorder& rec, ShapeBackend<S>& be, const Plan& plan, const GptOptions& mo, bool kept) {
  Rig r;
  const comm::Degrees& d = plan.degrees;
  auto group = [&](const char* dim, int size, int rank) {
    r.groups.push_back(std::make_unique<RecordingGroup>(rec, be, dim, size, rank));
    return r.groups.back().get();
  };
  if (d.tp > 1) model.set_tp_comm(group("tp", d.tp, 0));
  if (d.cp > 1) model.set_cp_comm(group("cp", d.cp, mo.cp.rank));
  if (plan.experts_placed()) {
    if (d.ep > 1) model.set_ep_comm(group("ep", d.ep, 0));
    if (d.etp > 1) model.set_etp_comm(group("etp", d.etp, 0));
  }
  const int dpg = d.dp * d.cp;
  if (!mo.own_params || !mo.own_grads) {
    r.res = std::make_unique<RecordingResidency>(rec, be, model.units(), plan.zero == 3 && dpg > 1, dpg, kept);
    model.set_residency(r.res.get());
  }
  return r;
}

// Expert parallel under a skewed routing: the compute between a block's dispatch and its
// combine scales with the rows this (the busiest) rank's experts hold; the group's mean rank,
// holding N k of them (N: a token holder's tokens; under expert tensor parallel every rank of
// an etp group computes the group's rows), waits the difference at the combine.
void mark_expert_idle(std::vector<PassItem>& items, const Plan& plan, const GptOptions& mo) {
  if (plan.degrees.ep <= 1 || !plan.experts_placed()) return;
  const GptConfig lc = moe_local_config(plan.model, moe_tokens(mo));
  const double mean = double(lc.micro_batch) * lc.seq * plan.model.top_k * std::max(1, plan.degrees.etp);
  auto exchange = [&](size_t i) { return items[i].comm && items[i].collective == "all_to_allv"; };
  for (size_t i = 0; i < items.size(); ++i) {
    if (!exchange(i)) continue;
    size_t j = i + 1;
    while (j < items.size() && !exchange(j)) ++j;
    if (j == items.size()) break;
    double rows = 0;
    for (size_t q = i + 1; q < j; ++q)
      if (!items[q].comm && items[q].op == Op::kMatmul && items[q].part.rfind("expert.fc", 0) == 0) rows += items[q].m;
    const double idle = rows > 0 ? std::max(0.0, 1.0 - mean / rows) : 0.0;
    for (size_t q = i + 1; q < j; ++q)
      if (!items[q].comm) items[q].idle = idle, items[q].idle_dim = idle > 0 ? "ep" : "";
    i = j;
  }
}

}  // namespace

std::vector<PassItem> pass_items(const Plan& plan, int pp_rank, int chunk, char phase, bool first_micro,
                                 bool last_micro) {
  GptOptions mo = plan_rank_options(plan, pp_rank);
  if (mo.cp.size > 1) mo.cp.rank = busiest_cp_rank(plan.model, mo.cp);
  ShapeBackend<S> be(routing_pairs(plan), plan.sp ? 1 : plan.degrees.tp);  // tp's sliced dispatch: every slice alike
  Recorder rec(be, phase);
  Gpt<S> model(plan.model, be, mo);
  rec.model = &model;
  const Rig r = rig(model, rec, be, plan, mo, plan.keep_params && !(phase == 'F' && first_micro));
  model.set_trace(&rec.events, 0, 0);
  model.set_hooks(BackwardHooks{[&](int64_t lo, int64_t, int) { rec.ready(lo); }, [&] { rec.after_op(); }});

  const GptConfig& c = plan.model;
  const bool first = model.first_stage() && chunk == 0;
  const bool last = model.last_stage() && chunk + 1 == model.num_chunks();
  std::vector<int32_t> tokens(size_t(c.micro_batch) * c.seq, 0), targets(tokens.size(), 0);
  const int64_t rows_c = int64_t{model.tp_dims().rows} * c.hidden;
  BackendArray<S, S> dout(be, rows_c), din(be, rows_c);
  if (!first) model.stage_input(chunk, 0);
  rec.on = phase == 'F';
  model.forward_chunk(chunk, 0, tokens.data(), targets.data());
  if (phase == 'B') {
    rec.on = true;
    model.backward_chunk(chunk, 0, S(1), last ? nullptr : dout.data(), first ? nullptr : din.data(),
                         last_micro || plan.zero == 3);
  }
  rec.after_op();
  std::vector<PassItem> items = std::move(rec.items);
  if (const RecordingResidency* res = r.res.get()) {  // ZeRO-3: prefetched gathers, reduce-scatters complete in the polls
    for (size_t i = 0; i < res->gathers.size(); ++i) items[res->gathers[i]].overlapped = i > 0 && plan.prefetch > 0;
    for (size_t i : res->scatters) items[i].overlapped = plan.overlap;
    if (last_micro && chunk == 0 && !res->scatters.empty()) items[res->scatters.back()].overlapped = false;
  }
  for (PassItem& it : items) it.posted = it.comm && posted_dim(it.dim);
  mark_expert_idle(items, plan, mo);
  return items;
}

}  // namespace meshbench::parallel
