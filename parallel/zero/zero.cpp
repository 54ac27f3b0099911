#include "zero/zero.hpp"

#include "data_parallel/data_parallel.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <numeric>

#include "core/error.hpp"

namespace meshbench::parallel {

GptOptions zero_model_options(int stage, int d, int edp) {
  GptOptions o;
  // equal slices, each 16-element aligned; with expert segments both parts split evenly over
  // both groups (the least common multiple of d and edp)
  o.unit_multiple = 16 * static_cast<int64_t>(edp > 0 ? std::lcm(d, edp) : d);
  o.expert_segments = edp > 0;
  o.own_params = stage < 3;
  o.own_grads = stage < 2;
  o.own_optimizer = false;
  return o;
}

template <typename S>
comm::View Zero<S>::view(S* p, int64_t n) const {
  return {p, static_cast<size_t>(n), comm::dtype_of<S>(),
          model_.backend().mem()};
}

template <typename S>
Zero<S>::Zero(Gpt<S>& model, comm::Communicator& dp, comm::Communicator* edp, const Plan& plan, TraceTags* tags,
              uint64_t seed)
    : model_(model), dp_(dp), edp_(edp), plan_(plan), tags_(tags), stage_(plan.zero), d_(dp.size()) {
  Backend<S>& be = model.backend();
  MemoryTracker* mt = &model.memory();
  units_.resize(model.units().size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& un = model.units()[u];
    UnitState& s = units_[u];
    s.lo = un.lo;
    s.len = un.hi - un.lo;
    auto segment = [&](int64_t lo, int64_t hi, comm::Communicator& c) {
      if ((hi - lo) % c.size() != 0)
        throw core::RuntimeFault(fmt::format("zero: unit {}: {} elements at {} do not split over {} ranks", un.name,
                                             hi - lo, lo, c.size()));
      s.segs.push_back({lo, hi - lo, (hi - lo) / c.size(), shard_elems_, &c, c.rank()});
      shard_elems_ += (hi - lo) / c.size();
    };
    if (un.experts_lo >= 0 && edp_ == nullptr)
      throw core::RuntimeFault(fmt::format("zero: unit {} has an expert segment but no edp group", un.name));
    segment(un.lo, un.experts_lo >= 0 ? un.experts_lo : un.hi, dp_);
    if (un.experts_lo >= 0) segment(un.experts_lo, un.hi, *edp_);
    if (plan.degrees.pp > 1 && model.config().tied) {
      const auto& es = model.layout().entries();
      s.held = std::any_of(es.begin(), es.end(),
                           [&](const LayoutEntry& e) { return e.name == "wte" && e.offset >= un.lo && e.offset < un.hi; });
    }
  }
  model.set_optimizer_shard(shard_elems_);
  order_f_ = order('F');
  order_b_ = order('B');
  if (stage_ >= 2) gshard_ = BackendArray<S, S>(be, shard_elems_, mt, MemCat::kGrads);
  if (stage_ == 3) {
    pshard_ = BackendArray<S, S>(be, shard_elems_, mt, MemCat::kParams);
    const std::vector<S> w = model.canonical_weights(seed);
    std::vector<S> mine(static_cast<size_t>(shard_elems_));
    for (const UnitState& s : units_)
      for (const Segment& g : s.segs) std::copy_n(w.begin() + g.lo + g.r * g.slice, g.slice, mine.begin() + g.shard_off);
    be.upload(pshard_.data(), mine.data(), pshard_.bytes());
    if (plan.micro_batches > 1) scratch_ = BackendArray<S, S>(be, shard_elems_, mt, MemCat::kGrads);
  }
  BackwardHooks hooks;
  if (stage_ == 1) hooks.grads_ready = [this](int64_t lo, int64_t, int layer) { on_ready(lo, layer); };
  hooks.poll = [this] { poll(); };
  model.set_hooks(std::move(hooks));
  if (stage_ >= 2) model.set_residency(this);
}

template <typename S>
Zero<S>::~Zero() {
  for (UnitState& s : units_) {
    for (auto& q : s.gather) q->wait();
    for (auto& q : s.rs) q->wait();
  }
  model_.set_hooks({});
  model_.set_residency(nullptr);
}

template <typename S>
int64_t Zero<S>::padding_elements() const {
  return model_.layout().total() - model_.num_params();
}

template <typename S>
std::string Zero<S>::describe() const {
  return fmt::format("ZeRO-{} over dp x cp = {}{}: {} units, shard of {} elements per rank ({} of {} flat "
                     "elements are padding){}{}",
                     stage_, d_, edp_ ? fmt::format(", the experts over edp = {}", edp_->size()) : std::string(),
                     units_.size(), shard_elems_, padding_elements(), model_.layout().total(),
                     stage_ == 3 ? fmt::format(", prefetch {}", plan_.prefetch) : std::string(),
                     stage_ == 3 && plan_.keep_params ? ", gathered units kept across micro-batches" : "");
}

template <typename S>
double Zero<S>::loss_scale() const {
  return DataParallel<S>::loss_scale(plan_);
}

template <typename S>
std::vector<int> Zero<S>::order(char phase) const {
  const int L = static_cast<int>(units_.size()) - 2;
  std::vector<int> o;
  if (phase == 'F') {
    for (int u = 0; u <= L + 1; ++u) o.push_back(u);
  } else {
    o.push_back(L + 1);
    if (model_.config().tied) o.push_back(0);
    for (int u = L; u >= 1; --u) o.push_back(u);
    if (!model_.config().tied) o.push_back(0);
  }
  return o;
}

template <typename S>
void Zero<S>::begin_forward(int micro) {
  micro_ = micro;
}

template <typename S>
void Zero<S>::begin_backward(int micro, bool last) {
  micro_ = micro;
  last_ = last;
  armed_ = last && plan_.overlap;  // interleaved pipelines: the last micro-batch of each chunk
}

// ---- reduce-scatter -----------------------------------------------------------------------

template <typename S>
void Zero<S>::on_ready(int64_t lo, int layer) {  // stage 1: the model's flat gradients
  if (!armed_) return;
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].lo == lo && !units_[u].held) {
      if (tags_) tags_->layer = layer;
      post_reduce_scatter(static_cast<int>(u));
    }
}

template <typename S>
void Zero<S>::post_reduce_scatter(int u) {
  UnitState& s = units_[static_cast<size_t>(u)];
  if (!s.rs.empty()) complete_reduce_scatter(u);  // a previous micro-batch's, into the same slices
  Backend<S>& be = model_.backend();
  s.posted = true;
  S* full = stage_ == 1 ? model_.grads() + s.lo : s.grad.data();
  if (fault_ != 0) {  // one element, before its reduction, on this rank only
    S x{};
    be.download(&x, full, sizeof(S));
    x = static_cast<S>(x + fault_);
    be.upload(full, &x, sizeof(S));
    fault_ = 0;
  }
  s.rs_into_scratch = stage_ == 3 && micro_ > 0 && !s.held;  // a held unit reduces once, at finish()
  for (const Segment& g : s.segs) {
    S* in = full + (g.lo - s.lo);
    g.comm->order_after(be.stream());
    if (stage_ == 1) {  // in place: the slice lands where the backend puts it (reduce_scatter_inplace_offset)
      S* slice = in + g.comm->reduce_scatter_inplace_offset(static_cast<size_t>(g.slice));
      s.rs.push_back(g.comm->ireduce_scatter(view(in, g.len), view(slice, g.slice), comm::RedOp::kSum));
      continue;
    }
    S* dst = (s.rs_into_scratch ? scratch_.data() : gshard_.data()) + g.shard_off;
    s.rs.push_back(g.comm->ireduce_scatter(view(in, g.len), view(dst, g.slice), comm::RedOp::kSum));
  }
  if (stage_ == 3 && !plan_.overlap) complete_reduce_scatter(u);  // --no-overlap: wait at once
}

template <typename S>
void Zero<S>::complete_reduce_scatter(int u) {
  UnitState& s = units_[static_cast<size_t>(u)];
  if (s.rs.empty()) return;
  for (auto& q : s.rs) q->wait_on(model_.backend().stream());  // the compute stream waits (issue 44, item 10)
  s.rs.clear();
  if (stage_ >= 2) s.grad.reset();  // the unit's full gradients are gone; the slices stay
  if (s.rs_into_scratch)             // a later micro-batch: accumulate into the shard
    for (const Segment& g : s.segs)
      model_.backend().add(gshard_.data() + g.shard_off, scratch_.data() + g.shard_off, g.slice);
  s.rs_into_scratch = false;
}

template <typename S>
void Zero<S>::poll() {
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = units_[u];
    if (!s.rs.empty() && std::all_of(s.rs.begin(), s.rs.end(), [](auto& q) { return q->test(); }))
      complete_reduce_scatter(static_cast<int>(u));
    for (auto& q : s.gather) q->test();
  }
}

template <typename S>
void Zero<S>::finish() {
  armed_ = false;
  // Stages 1 and 2 reduce after the last micro-batch: post what remains; stage 3 its held unit
  // (a tied embedding's, its micro-batches' gradients summed over the embedding group first).
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = units_[u];
    if (!s.posted && (stage_ <= 2 || s.held)) post_reduce_scatter(static_cast<int>(u));
  }
  for (UnitState& s : units_) s.posted = false;  // the next step reduces every unit again
  for (size_t u = 0; u < units_.size(); ++u) complete_reduce_scatter(static_cast<int>(u));
}

// ---- residency (stages 2 and 3) -----------------------------------------------------------

template <typename S>
void Zero<S>::post_gather(int u) {
  UnitState& s = units_[static_cast<size_t>(u)];
  if (s.gathered.data() != nullptr) return;  // held, or already on its way
  Backend<S>& be = model_.backend();
  s.gathered = BackendArray<S, S>(be, s.len, &model_.memory(), MemCat::kParams);
  for (const Segment& g : s.segs) {
    g.comm->order_after(be.stream());  // the optimizer wrote the shard on the compute stream
    s.gather.push_back(g.comm->iall_gather(view(pshard_.data() + g.shard_off, g.slice),
                                           view(s.gathered.data() + (g.lo - s.lo), g.len)));
  }
}

template <typename S>
void Zero<S>::acquire(int u, char phase) {
  UnitState& s = units_[static_cast<size_t>(u)];
  if (stage_ == 3) {
    post_gather(u);
    const std::vector<int>& seq = phase == 'F' ? order_f_ : order_b_;
    const auto at = std::find(seq.begin(), seq.end(), u);
    for (auto it = at == seq.end() ? at : at + 1; it != seq.end() && it - at <= plan_.prefetch; ++it) post_gather(*it);
    if (!s.gather.empty()) {
      for (auto& q : s.gather) q->wait_on(model_.backend().stream());
      s.gather.clear();
      model_.backend().written(s.gathered.data(), s.gathered.bytes());
    }
  }
  if (phase == 'B' && !s.rs.empty()) complete_reduce_scatter(u);  // stage 3: the last micro-batch's
  if (phase == 'B' && s.grad.data() == nullptr) {
    s.grad = BackendArray<S, S>(model_.backend(), s.len, &model_.memory(), MemCat::kGrads);  // zeroed
  }
}

template <typename S>
void Zero<S>::release(int u, char phase) {
  UnitState& s = units_[static_cast<size_t>(u)];
  if (phase == 'B' && !s.held && (stage_ == 3 || (last_ && plan_.overlap))) post_reduce_scatter(u);
  if (stage_ == 3 && !(plan_.keep_params && !(phase == 'B' && last_))) {
    for (auto& q : s.gather) q->wait_on(model_.backend().stream());
    s.gather.clear();
    s.gathered.reset();
  }
}

template <typename S>
S* Zero<S>::params(int u) {
  const UnitState& s = units_[static_cast<size_t>(u)];
  return stage_ == 3 ? s.gathered.data() : model_.params() + s.lo;
}

template <typename S>
S* Zero<S>::grads(int u) {
  return units_[static_cast<size_t>(u)].grad.data();
}

// ---- the optimizer on the shard, then the parameters back to every rank --------------------

template <typename S>
void Zero<S>::optimizer_step(const AdamWConfig& cfg, int t) {
  std::vector<typename Gpt<S>::OptPiece> pieces;
  for (const UnitState& s : units_)
    for (const Segment& g : s.segs) {
      const int64_t lo = g.lo + g.r * g.slice;
      S* p = stage_ == 3 ? pshard_.data() + g.shard_off : model_.params() + lo;
      const S* gr = stage_ == 1 ? model_.grads() + g.lo + g.comm->reduce_scatter_inplace_offset(static_cast<size_t>(g.slice))
                                : gshard_.data() + g.shard_off;
      pieces.push_back({lo, lo + g.slice, p, gr, g.shard_off});
    }
  model_.update_pieces(pieces, cfg, t);
  if (stage_ == 3) return;  // the next forward gathers the updated slices
  Backend<S>& be = model_.backend();
  std::vector<std::unique_ptr<comm::Request>> reqs;
  for (const UnitState& s : units_)  // in place: my slice sits at its place in the segment
    for (const Segment& g : s.segs) {
      g.comm->order_after(be.stream());
      reqs.push_back(g.comm->iall_gather(view(model_.params() + g.lo + g.r * g.slice, g.slice),
                                         view(model_.params() + g.lo, g.len)));
    }
  for (auto& q : reqs) q->wait_on(be.stream());
  be.written(model_.params(), sizeof(S) * static_cast<size_t>(model_.layout().total()));
}

// ---- --check and the metrics --------------------------------------------------------------

template <typename S>
std::vector<S> Zero<S>::gather_full(const S* shard) {
  Backend<S>& be = model_.backend();
  BackendArray<S, S> full(be, model_.layout().total());
  for (const UnitState& s : units_)
    for (const Segment& g : s.segs) {
      g.comm->order_after(be.stream());  // the shard was written on the compute stream
      g.comm->all_gather(view(const_cast<S*>(shard) + g.shard_off, g.slice), view(full.data() + g.lo, g.len));
    }
  dp_.synchronize();  // NCCL queues even the blocking forms on its stream
  if (edp_) edp_->synchronize();
  std::vector<S> host(static_cast<size_t>(full.size()));
  be.download(host.data(), full.data(), full.bytes());
  return host;
}

template <typename S>
std::vector<S> Zero<S>::full_grads() {
  if (stage_ >= 2) return gather_full(gshard_.data());
  // stage 1: each unit's slice sits inside the flat gradients; copy them into one shard
  Backend<S>& be = model_.backend();
  BackendArray<S, S> shard(be, shard_elems_);
  for (const UnitState& s : units_)
    for (const Segment& g : s.segs)
      be.copy(shard.data() + g.shard_off,
              model_.grads() + g.lo + g.comm->reduce_scatter_inplace_offset(static_cast<size_t>(g.slice)), g.slice);
  return gather_full(shard.data());
}

template <typename S>
std::vector<S> Zero<S>::full_params() {
  return stage_ == 3 ? gather_full(pshard_.data()) : model_.download_params();
}

template <typename S>
std::vector<AnalyticBytes> Zero<S>::analytic() const {
  uint64_t held = 0, dense = 0, experts = 0;
  for (const UnitState& s : units_) {
    held += s.held ? static_cast<uint64_t>(s.len) * sizeof(S) : 0;
    for (const Segment& g : s.segs) (g.comm == &dp_ ? dense : experts) += static_cast<uint64_t>(g.len) * sizeof(S);
  }
  std::vector<AnalyticBytes> a = zero_analytic(dense, stage_, d_, plan_.micro_batches, plan_.keep_params, held);
  if (edp_) {
    const std::vector<AnalyticBytes> e =
        zero_analytic(experts, stage_, edp_->size(), plan_.micro_batches, plan_.keep_params, 0, "edp");
    a.insert(a.end(), e.begin(), e.end());
  }
  return a;
}

std::vector<AnalyticBytes> zero_analytic(uint64_t P, int stage, int d, int micro_batches, bool keep_params,
                                         uint64_t held, const char* dim) {
  if (d <= 1) return {};  // a group of one issues no call (RecordingComm)
  const uint64_t m = static_cast<uint64_t>(micro_batches);
  uint64_t rs = P, ag = P;
  if (stage == 3) {
    rs = (P - held) * m + held;        // every micro-batch's gradients; a held unit's once
    ag = keep_params ? P : 2 * P * m;  // forward and backward of every micro-batch
  }
  return {{dim, "reduce_scatter", rs, wire_bytes(comm::Collective::kReduceScatter, rs, d)},
          {dim, "all_gather", ag, wire_bytes(comm::Collective::kAllGather, ag, d)}};
}

StateBytes zero_state_bytes(int64_t flat_elements, int scalar_bytes, int stage, int d) {
  const double P = double(flat_elements) * scalar_bytes;
  return {stage >= 3 ? P / d : P, stage >= 2 ? P / d : P, stage >= 1 ? 2 * P / d : 2 * P};
}

StateBytes zero_state_bytes(int64_t flat_elements, int64_t expert_elements, int scalar_bytes, int stage, int d,
                            int edp) {
  const StateBytes a = zero_state_bytes(flat_elements - expert_elements, scalar_bytes, stage, d);
  const StateBytes b = zero_state_bytes(expert_elements, scalar_bytes, stage, std::max(1, edp));
  return {a.params + b.params, a.grads + b.grads, a.optimizer + b.optimizer};
}

template class Zero<float>;

void validate_zero(const Plan& p) {
  using core::UsageError;
  if (p.zero < 0 || p.zero > 3) throw UsageError(fmt::format("--zero {}: must be 0, 1, 2 or 3", p.zero));
  if (p.prefetch < 0) throw UsageError(fmt::format("--prefetch {}: must be >= 0", p.prefetch));
  if (p.keep_params && p.zero != 3) throw UsageError("--zero3-keep-params: needs --zero 3");
  if (p.zero > 0 && p.progress == Progress::kThread)
    throw UsageError(fmt::format("--progress thread: runs plain data parallel only (--zero {} tests its "
                                 "reductions between backward ops)", p.zero));
  if (p.zero > 0 && p.bucket_mb > 0) {
    const int64_t unit = largest_unit_elements(p.model);
    if (p.bucket_mb * 1024 * 1024 / 4 < static_cast<double>(unit))
      throw UsageError(fmt::format("--bucket-mb {} with --zero {}: ZeRO reduces and gathers whole units (the "
                                   "embeddings, a block, the head); the largest holds {} elements ({:.2f} MiB), "
                                   "so the bucket must be 0 or at least that",
                                   p.bucket_mb, p.zero, unit, static_cast<double>(unit) * 4.0 / 1024 / 1024));
  }
}

int64_t largest_unit_elements(const GptConfig& c) {
  const int64_t C = c.hidden, F = c.ffn, V = c.vocab, QKV = c.qkv_width();
  const int64_t embed = V * C + int64_t{c.max_seq} * C;
  const int64_t mlp = F * C + F + C * F + C;  // a MoE block: E of them and the router instead
  const int64_t block = 4 * C + QKV * C + QKV + C * C + C + (c.experts > 0 ? c.experts * (C + mlp) : mlp);
  const int64_t head = 2 * C + V + (c.tied ? 0 : V * C);
  return std::max({embed, block, head});
}

}  // namespace meshbench::parallel
