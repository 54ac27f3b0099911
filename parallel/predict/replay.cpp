#include "predict/replay.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>
#include <stdexcept>

#include <fmt/core.h>

#include "context_parallel/plan.hpp"
#include "core/error.hpp"
#include "core/op_watch.hpp"
#include "core/timer.hpp"
#include "data_parallel/data_parallel.hpp"
#include "expert_parallel/plan.hpp"
#include "kernels/layers.hpp"
#include "model/model.hpp"
#include "pipeline_parallel/walk.hpp"
#include "tensor_parallel/plan.hpp"
#include "zero/zero.hpp"

namespace meshbench::parallel {

comm::Communicator* ReplayComms::by_dim(const std::string& dim) const {
  if (dim == "dp") return dp;
  if (dim == "tp") return tp;
  if (dim == "cp") return cp;
  if (dim == "ep") return ep;
  if (dim == "edp") return edp;
  if (dim == "etp") return etp;
  if (dim == "embedding") return pipe ? pipe->embedding : nullptr;
  if (dim == "pp") return pipe ? pipe->pp : nullptr;
  return nullptr;
}

namespace {

// Floats of one call's full buffer S as the costs send it (Costs::wire_bytes), a multiple of the
// group (the gathers' and scatters' equal parts).
size_t floats_of(const PassItem& it, const Costs& costs) {
  const size_t n = static_cast<size_t>(std::ceil(costs.wire_bytes(it) / 4));
  const size_t g = static_cast<size_t>(std::max(1, it.group));
  return (n + g - 1) / g * g;
}

// Floats a call needs: its receive buffer and, out of place, its send buffer.
size_t call_floats(const PassItem& it, const Costs& costs) {
  const size_t n = floats_of(it, costs), g = static_cast<size_t>(std::max(1, it.group));
  if (it.collective == "all_reduce") return n;
  if (it.collective == "all_gather" || it.collective == "reduce_scatter") return n + n / g;
  return 2 * n;  // all_to_all(v), sendrecv
}

// The pipeline's message: one stage boundary's activations (pipeline_analytic's), as sent.
PassItem message_item(const Plan& plan) {
  const TpDims d = tp_dims(plan.model, plan_rank_options(plan, 0).tp, plan_rank_options(plan, 0).cp);
  PassItem it;
  it.comm = true, it.dim = "pp", it.collective = "sendrecv", it.group = 2;
  it.bytes = uint64_t(d.rows) * uint64_t(plan.model.hidden) * 4;
  return it;
}
size_t message_floats(const Plan& plan, const Costs& costs) {
  return static_cast<size_t>(std::ceil(costs.wire_bytes(message_item(plan)) / 4));
}

bool bucket_item(const Plan& plan, const PassItem& it) { return plan.zero == 0 && it.posted && it.dim == "dp"; }

struct Sizes {
  size_t scratch = 0, posted = 0, msg = 0;
};

Sizes buffer_sizes(const Plan& plan, int pp_rank, const Costs& costs) {
  Sizes s;
  auto blocking = [&](const std::vector<PassItem>& v) {
    for (const PassItem& it : v)
      if (it.comm) s.scratch = std::max(s.scratch, call_floats(it, costs));
  };
  const std::vector<Action> actions = rank_actions(plan, pp_rank);
  std::set<std::tuple<int, char, bool, bool>> seen;
  std::set<int> first;
  for (const Action& a : actions) {
    if (a.kind != ActionKind::kForward && a.kind != ActionKind::kBackward) continue;
    const char ph = a.kind == ActionKind::kForward ? 'F' : 'B';
    const bool f = ph == 'F' && first.insert(a.chunk).second, l = ph == 'B' && a.micro == plan.micro_batches - 1;
    if (seen.insert({a.chunk, ph, f, l}).second) blocking(pass_items(plan, pp_rank, a.chunk, ph, f, l));
  }
  const SyncItems sync = sync_items(plan, pp_rank);
  size_t g = 0, o = 0;
  for (const PassItem& it : sync.grad_sync) {
    if (!it.comm) continue;
    if (it.posted && it.dim != "edp") g += call_floats(it, costs);
    else s.scratch = std::max(s.scratch, call_floats(it, costs));
  }
  for (const PassItem& it : sync.optimizer)
    if (it.comm) o += call_floats(it, costs);
  s.posted = std::max(g, o);
  if (plan.degrees.pp > 1) s.msg = 2 * message_floats(plan, costs);
  return s;
}

// Waits until `deadline` on this rank's steady clock: sleeps to within kSpinSeconds, spins the rest.
void wait_until(double deadline) {
  double now = core::now_seconds();
  if (deadline - now > kSpinSeconds) {
    const double d = deadline - now - kSpinSeconds;
    timespec ts{static_cast<time_t>(d), static_cast<long>((d - std::floor(d)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  while (core::now_seconds() < deadline) {
  }
  core::note_progress();  // a modelled compute item is progress to the watchdog (core/op_watch.hpp)
}

comm::View view_of(float* p, size_t n) { return comm::View{p, n, comm::DType::kFloat, compute::MemKind::kHost}; }

}  // namespace

uint64_t replay_buffer_bytes(const Plan& plan, int pp_rank, const Costs& costs) {
  const Sizes s = buffer_sizes(plan, pp_rank, costs);
  return uint64_t(s.scratch + s.posted + s.msg) * 4;
}

Replay::Replay(const Plan& plan, const Costs& costs, ReplayComms comms, int pp_rank, int ep_rank, Trace& trace)
    : plan_(plan), costs_(costs), comms_(comms), pp_rank_(pp_rank), ep_rank_(ep_rank), tr_(trace),
      sync_(sync_items(plan, pp_rank)) {
  const Sizes s = buffer_sizes(plan, pp_rank, costs);
  // first touched here, not in the first step
  scratch_.assign(s.scratch, 0.0f);
  posted_.assign(s.posted, 0.0f);
  msg_.assign(s.msg, 0.0f);
  for (const PassItem& it : sync_.grad_sync)
    if (bucket_item(plan_, it)) bucket_items_.push_back(it);
  if (plan.progress == Progress::kThread && !bucket_items_.empty())
    progress_ = std::thread([this] {
      while (!stop_) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          for (auto& b : buckets_) b->test();
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    });
}

Replay::~Replay() {
  stop_ = true;
  if (progress_.joinable()) progress_.join();
  for (auto& r : sends_)
    if (r) r->wait();
  for (auto& b : buckets_)
    if (b) b->wait();
}

const std::vector<PassItem>& Replay::pass(int chunk, char phase, bool first, bool last) {
  const auto key = std::make_tuple(chunk, phase, first, last);
  auto it = passes_.find(key);
  if (it == passes_.end()) it = passes_.emplace(key, pass_items(plan_, pp_rank_, chunk, phase, first, last)).first;
  return it->second;
}

void Replay::flush() {
  if (owed_ <= 0) {
    owed_items_.clear();
    return;
  }
  const double t0 = core::now_seconds();
  wait_until(t0 + owed_);
  owed_ = 0;
  if (tr_.on) {  // the modelled ops back to back from the wait's start (the time split's compute)
    double t = t0;
    for (const auto& [it, dt] : owed_items_) {
      const bool flops = it->op == Op::kMatmul || it->op == Op::kAttention;
      tr_.ops.push_back({tr_.tags.step, tr_.tags.micro, -1, it->op, it->phase, flops ? it->units : 0.0, t, t + dt,
                         tr_.tags.chunk, "", it->part.c_str(), it->m, it->n, it->k});
      t += dt;
    }
  }
  owed_items_.clear();
}

double Replay::duration(const PassItem& it) {
  std::string what;
  const Timing t = costs_.time(it, &what);
  if (t.extrapolated && !what.empty() && std::find(extrapolated_.begin(), extrapolated_.end(), what) == extrapolated_.end())
    extrapolated_.push_back(what);
  return t.seconds;
}

void Replay::compute(const PassItem& it) {
  double dt = duration(it);
  // Uneven expert loads: the items describe ep rank 0, the busiest; the other ranks of the
  // group hold the rest of the rows evenly: (ep (1 - idle) - 1) / (ep - 1) of its work.
  if (it.idle > 0 && ep_rank_ > 0) {
    const double ep = std::max(2, plan_.degrees.ep);
    dt *= std::max(0.0, (ep * (1.0 - it.idle) - 1.0) / (ep - 1.0));
  }
  owed_ += dt;
  owed_items_.emplace_back(&it, dt);
}

void Replay::call(const PassItem& it) {
  comm::Communicator* c = comms_.by_dim(it.dim);
  if (c == nullptr || c->size() != it.group)
    throw std::logic_error(fmt::format("replay: a {} call over {} ranks, but this rank's {} group has {}", it.collective,
                                       it.group, it.dim, c ? c->size() : 0));
  const size_t n = floats_of(it, costs_), g = static_cast<size_t>(it.group);
  float* a = scratch_.data();
  if (it.collective == "all_reduce") {
    c->all_reduce(view_of(a, n), view_of(a, n), comm::RedOp::kSum);
  } else if (it.collective == "all_gather") {
    c->all_gather(view_of(a + n, n / g), view_of(a, n));
  } else if (it.collective == "reduce_scatter") {
    c->reduce_scatter(view_of(a, n), view_of(a + n, n / g), comm::RedOp::kSum);
  } else if (it.collective == "all_to_all") {
    c->all_to_all(view_of(a, n), view_of(a + n, n));
  } else if (it.collective == "all_to_allv") {  // equal blocks of the busiest rank's payload
    const comm::PeerBlocks b = comm::PeerBlocks::packed(std::vector<size_t>(g, n / g));
    c->all_to_allv(view_of(a, n), b, view_of(a + n, n), b);
  } else if (it.collective == "sendrecv") {  // a ring step: to the next rank, from the previous
    const int r = c->rank(), G = it.group;
    c->sendrecv(view_of(a, n), (r + 1) % G, view_of(a + n, n), (r + G - 1) % G);
  } else {
    throw std::logic_error("replay: no call for collective " + it.collective);
  }
}

std::unique_ptr<comm::Request> Replay::post(const PassItem& it, float* buf) {
  comm::Communicator* c = comms_.by_dim(it.dim);
  if (c == nullptr || c->size() != it.group)
    throw std::logic_error(fmt::format("replay: a posted {} over {} ranks without its {} group", it.collective, it.group, it.dim));
  const size_t n = floats_of(it, costs_), g = static_cast<size_t>(it.group);
  if (it.collective == "all_reduce") return c->iall_reduce(view_of(buf, n), view_of(buf, n), comm::RedOp::kSum);
  if (it.collective == "all_gather") return c->iall_gather(view_of(buf + n, n / g), view_of(buf, n));
  if (it.collective == "reduce_scatter") return c->ireduce_scatter(view_of(buf, n), view_of(buf + n, n / g), comm::RedOp::kSum);
  throw std::logic_error("replay: no posted call for collective " + it.collective);
}

// Posts the buckets whose gradients are final (from element `lo` on).
void Replay::post_ready(int64_t lo) {
  size_t off = 0;
  for (size_t k = 0; k < next_bucket_; ++k) off += call_floats(bucket_items_[k], costs_);
  while (next_bucket_ < bucket_items_.size() && bucket_items_[next_bucket_].ready_from >= lo) {
    const PassItem& it = bucket_items_[next_bucket_];
    std::unique_ptr<comm::Request> r = post(it, posted_.data() + off);
    std::lock_guard<std::mutex> lock(mu_);
    buckets_.push_back(std::move(r));
    off += call_floats(it, costs_);
    ++next_bucket_;
  }
}

void Replay::items(const PassItem* first, const PassItem* last, bool arm) {
  for (const PassItem* p = first; p != last; ++p) {
    const PassItem& it = *p;
    if (!it.comm) {
      compute(it);
      // --progress poll: DataParallel tests its posted buckets after every op
      if (plan_.progress == Progress::kPoll && !buckets_.empty()) {
        flush();
        for (auto& b : buckets_) b->test();
      }
    } else {
      flush();
      if (it.posted) {  // ZeRO-3's gathers and reductions: posted, waited before the unit's next use
        post(it, scratch_.data())->wait();
      } else {
        call(it);
      }
    }
    if (arm && it.ready_from >= 0) {
      flush();
      post_ready(it.ready_from);
    }
  }
  flush();
}

void Replay::grad_sync() {
  // the pipeline's sends complete (PipeExchange::drain)
  for (auto& r : sends_) r->wait();
  sends_.clear();
  post_ready(0);  // buckets not yet posted (--no-overlap: all of them)
  for (const PassItem& it : sync_.grad_sync)
    if (it.comm && it.dim == "embedding") call(it);
  if (plan_.zero == 0) {
    std::vector<std::unique_ptr<comm::Request>> reqs;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reqs.swap(buckets_);
    }
    for (auto& b : reqs) b->wait();
    next_bucket_ = 0;
    for (const PassItem& it : sync_.grad_sync)
      if (it.comm && it.dim == "edp") call(it);
    return;
  }
  posted_together(sync_.grad_sync);
}

// ZeRO's reductions (after the backward) or gathers (after the update): posted, then waited.
void Replay::posted_together(const std::vector<PassItem>& v) {
  std::vector<std::unique_ptr<comm::Request>> reqs;
  size_t off = 0;
  for (const PassItem& it : v) {
    if (!it.comm || it.dim == "embedding") continue;
    reqs.push_back(post(it, posted_.data() + off));
    off += call_floats(it, costs_);
  }
  for (auto& r : reqs) r->wait();
}

// One step's walk: each action does for real what the engine's would do to the network, with
// the compute waited for; each completed action's phase is a span of the time split.
struct Replay::Walk {
  Replay& r;
  int step, m;
  bool overlap;        // the last backward of each chunk posts the buckets (DataParallel::begin_backward)
  std::set<int> seen;  // chunks forwarded once (their first forward)
  size_t msg;          // floats of one pipeline message
  PipeEnv* pipe;
  double t_prev, t0 = 0;

  void begin(const Action& a) {
    r.tr_.tags.micro = a.micro;
    r.tr_.tags.chunk = a.chunk;
    t0 = t_prev;
  }
  void end(const Action&, const char* phase) {
    t_prev = core::now_seconds();
    r.tr_.phase(phase, t0, t_prev);
  }
  bool forward(const Action& a) {
    r.tr_.tags.phase = 'F';
    r.run(r.pass(a.chunk, 'F', seen.insert(a.chunk).second, false), false);
    if (r.tr_.on && pipe) r.tr_.passes.push_back({step, a.micro, a.chunk, 'F', t0, core::now_seconds()});
    return true;
  }
  bool backward(const Action& a) {
    r.tr_.tags.phase = 'B';
    r.run(r.pass(a.chunk, 'B', false, a.micro == m - 1), overlap && a.micro == m - 1);
    if (r.tr_.on && pipe) r.tr_.passes.push_back({step, a.micro, a.chunk, 'B', t0, core::now_seconds()});
    return true;
  }
  bool send(const Action& a) {
    const bool grad = a.kind == ActionKind::kSendGradient;
    const int vs = pipe->virtual_stage(a.chunk);
    // the sends only read: every one from the same buffer (MPI-3)
    r.sends_.push_back(pipe->pp->isend(view_of(r.msg_.data(), msg), a.peer, pipe->tag(a.micro, grad ? vs - 1 : vs, grad)));
    return true;
  }
  bool recv(const Action& a) {
    const bool grad = a.kind == ActionKind::kRecvGradient;
    r.tr_.tags.micro = a.micro;
    r.tr_.tags.chunk = a.chunk;
    r.tr_.tags.phase = grad ? 'B' : 'F';
    const int vs = pipe->virtual_stage(a.chunk);
    pipe->pp->irecv(view_of(r.msg_.data() + msg, msg), a.peer, pipe->tag(a.micro, grad ? vs : vs - 1, grad))->wait();
    return true;
  }
  bool exchange(const Action& s, const Action& rv) { return send(s) && recv(rv); }
  bool grad_sync(const Action&) {
    r.tr_.tags.phase = 'G';
    r.tr_.tags.layer = -1;
    r.grad_sync();
    return true;
  }
  bool optimizer(const Action&) {
    r.tr_.tags.phase = 'O';
    // AdamW over this rank's elements (the first item), then ZeRO's gathers, posted together
    r.items(r.sync_.optimizer.data(), r.sync_.optimizer.data() + 1, false);
    r.posted_together(r.sync_.optimizer);
    return true;
  }
};

double Replay::run_step(const std::vector<Action>& actions, int step) {
  tr_.tags = TraceTags{step, 0, -1, 'F'};
  const double t_begin = core::now_seconds();
  Walk w{*this, step, plan_.micro_batches, plan_.zero == 0 && plan_.overlap && !bucket_items_.empty(), {},
         msg_.size() / 2, comms_.pipe, t_begin};
  walk_actions(actions, 0, w);
  if (tr_.on) {
    tr_.step_start.push_back(t_begin);
    tr_.step_end.push_back(w.t_prev);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::vector<AnalyticBytes> layer_analytic(const Plan& plan, int sb, int layers, int moe_layers, bool first, bool last) {
  std::vector<AnalyticBytes> a = tp_analytic(plan, sb, layers, first, last, moe_layers);
  for (auto v : {cp_analytic(plan, sb, layers), moe_split_analytic(plan, sb, moe_layers)}) a.insert(a.end(), v.begin(), v.end());
  return a;
}

std::vector<AnalyticBytes> Replay::analytic() const {
  constexpr int kSb = 4;  // the closed forms in fp32 (the engine's), then scaled as the costs send each kind
  std::vector<AnalyticBytes> a;
  auto add = [&](const std::vector<AnalyticBytes>& v) { a.insert(a.end(), v.begin(), v.end()); };
  const GptOptions mo = plan_rank_options(plan_, pp_rank_);
  const int d = plan_.degrees.dp * plan_.degrees.cp;
  const int64_t P = Gpt<float>::flat_elements(plan_.model, mo);
  int64_t experts = 0;  // the expert tensors, reduced over edp (DataParallel's ExpertGrads; ZeRO's segments)
  if (plan_.experts_placed() && plan_.zero == 0)
    for (const auto& [lo, hi] : moe_expert_ranges(Gpt<float>::layout_of(plan_.model, mo), plan_.model)) experts += hi - lo;
  else if (plan_.experts_placed())
    experts = Gpt<float>::expert_segment_elements(plan_.model, mo);
  if (plan_.zero == 0 && d > 1) {
    add(dp_analytic(uint64_t(P - experts) * kSb, d, uint64_t(experts) * kSb, plan_.experts_placed() ? plan_.degrees.edp : 1));
  } else if (plan_.zero > 0 && d > 1) {
    add(zero_analytic(uint64_t(P - experts) * kSb, plan_.zero, d, plan_.micro_batches, plan_.keep_params));
  }
  int layers = 0, moe_layers = 0;
  const std::vector<std::pair<int, int>> chunks =
      mo.stage ? mo.stage->chunks : std::vector<std::pair<int, int>>{{0, plan_.model.layers}};
  for (const auto& [lo, hi] : chunks)
    for (int l = lo; l < hi; ++l) {
      ++layers;
      moe_layers += plan_.model.is_moe(l) ? 1 : 0;
    }
  const bool first = !mo.stage || mo.stage->first, last = !mo.stage || mo.stage->last;
  add(layer_analytic(plan_, kSb, layers, moe_layers, first, last));
  if (comms_.pipe) {
    const TpDims td = tp_dims(plan_.model, mo.tp, mo.cp);
    const uint64_t wte = uint64_t(td.vocab) * uint64_t(plan_.model.hidden) * kSb;
    add(pipeline_analytic(*comms_.pipe, plan_.micro_batches, message_item(plan_).bytes, wte));
  }
  // as sent: each (dim, kind) at the costs' bytes per fp32 byte (a GPU's bf16 activations: half)
  for (AnalyticBytes& r : a) {
    PassItem it;
    it.comm = true, it.dim = r.dim, it.bytes = 1 << 20, it.group = 1;
    it.collective = r.kind == "send" || r.kind == "recv" ? "sendrecv" : r.kind;
    const double f = costs_.wire_bytes(it) / double(it.bytes);
    r.payload = uint64_t(std::llround(double(r.payload) * f));
    r.wire *= f;
    r.all_ranks = uint64_t(std::llround(double(r.all_ranks) * f));
  }
  if (plan_.degrees.ep > 1) {  // the op list's expected exchanges, as the replay sends them
    for (const CommTotal& c : step_comm_list(plan_, pp_rank_)) {
      if (c.dim != "ep") continue;
      PassItem it;
      it.comm = true, it.dim = c.dim, it.collective = c.collective, it.bytes = c.bytes, it.group = c.group;
      const double S = double(floats_of(it, costs_)) * 4 * c.calls;
      auto row = std::find_if(a.begin(), a.end(), [&](const AnalyticBytes& x) { return x.dim == "ep" && x.kind == c.collective; });
      if (row == a.end()) {
        a.push_back({"ep", c.collective, 0, 0});
        row = a.end() - 1;
      }
      row->payload += uint64_t(S);
      row->wire += S * (c.group - 1) / c.group;
    }
  }
  return a;
}

}  // namespace meshbench::parallel
