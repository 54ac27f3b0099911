#include "data_parallel/data_parallel.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/core.h>

namespace meshbench::parallel {

int64_t ExpertGrads::elements() const {
  int64_t n = 0;
  for (const auto& [lo, hi] : ranges) n += hi - lo;
  return n;
}

template <typename S>
DataParallel<S>::DataParallel(Gpt<S>& model, comm::Communicator& dp, const Plan& plan,
                              TraceTags* tags, ExpertGrads experts)
    : model_(model), dp_(dp), plan_(plan), tags_(tags), experts_(std::move(experts)) {
  const int64_t P = model.layout().total();
  bucket_elems_ = parallel::bucket_elements(plan, P, static_cast<int>(sizeof(S)));
  for (int64_t hi = P; hi > 0; hi -= bucket_elems_) buckets_.push_back({std::max<int64_t>(0, hi - bucket_elems_), hi, {}});
  BackwardHooks hooks;
  hooks.grads_ready = [this](int64_t lo, int64_t, int layer) { on_ready(lo, layer); };
  if (plan.progress == Progress::kPoll) hooks.poll = [this] { poll(); };
  model.set_hooks(std::move(hooks));
  if (plan.progress == Progress::kThread) progress_ = std::thread([this] { progress_loop(); });
}

template <typename S>
DataParallel<S>::~DataParallel() {
  stop_ = true;
  if (progress_.joinable()) progress_.join();
  model_.set_hooks({});
}

template <typename S>
uint64_t DataParallel<S>::grad_bytes() const {
  return static_cast<uint64_t>(model_.layout().total() - experts_.elements()) * sizeof(S);
}

template <typename S>
double DataParallel<S>::loss_scale(const Plan& plan) {
  // Context parallel: a rank's mean loss covers 1/cp of its samples' tokens, so the cp ranks'
  // gradients add up to the samples' mean with a further 1/cp.
  const double m = plan.micro_batches, d = plan.degrees.dp * plan.degrees.cp;
  return plan.grad_reduce == GradReduce::kAvg ? 1.0 / (m * d) : 1.0 / (m * plan.degrees.cp);
}

template <typename S>
void DataParallel<S>::begin_backward(int, bool last_micro) {
  armed_ = last_micro && plan_.overlap;  // interleaved pipelines: the last micro-batch of each chunk
}

template <typename S>
std::string DataParallel<S>::describe() const {
  const std::string experts =
      experts_.ranges.empty() ? std::string()
                              : fmt::format("; the expert tensors ({} elements) skipped{}", experts_.elements(),
                                            experts_.edp && experts_.edp->size() > 1
                                                ? fmt::format(", all-reduced over edp = {} after them", experts_.edp->size())
                                                : std::string(" (edp = 1: each rank holds the only copy)"));
  return fmt::format("data parallel: {} gradient buckets of up to {} elements, all-reduced over dp x cp = {}{}{}",
                     buckets_.size(), bucket_elems_, dp_.size(),
                     plan_.overlap ? ", overlapped with the backward" : ", after the backward (--no-overlap)", experts);
}

std::vector<AnalyticBytes> dp_analytic(uint64_t dense_bytes, int d, uint64_t expert_bytes, int edp) {
  std::vector<AnalyticBytes> out = {{"dp", "all_reduce", dense_bytes, wire_bytes(comm::Collective::kAllReduce, dense_bytes, d)}};
  if (edp > 1)
    out.push_back({"edp", "all_reduce", expert_bytes, wire_bytes(comm::Collective::kAllReduce, expert_bytes, edp)});
  return out;
}

template <typename S>
std::vector<AnalyticBytes> DataParallel<S>::analytic() const {
  const int edp = experts_.edp ? experts_.edp->size() : 1;
  return dp_analytic(grad_bytes(), dp_.size(), static_cast<uint64_t>(experts_.elements()) * sizeof(S), edp);
}

template <typename S>
void DataParallel<S>::on_ready(int64_t lo, int layer) {
  if (!armed_) return;
  if (tags_) tags_->layer = layer;
  // Gradients [lo, end) are final: post every bucket lying inside that range.
  while (next_ < buckets_.size() && buckets_[next_].lo >= lo) post(next_++);
}

template <typename S>
void DataParallel<S>::post(size_t b) {
  Bucket& k = buckets_[b];
  S* g = model_.grads();
  Backend<S>& be = model_.backend();
  if (fault_ != 0) {  // one element, before its reduction, on this rank only
    S x{};
    be.download(&x, g + k.lo, sizeof(S));
    x = static_cast<S>(x + fault_);
    be.upload(g + k.lo, &x, sizeof(S));
    fault_ = 0;
  }
  dp_.order_after(be.stream());
  std::lock_guard<std::mutex> lock(mu_);
  int64_t lo = k.lo;  // the pieces of [k.lo, k.hi) between the expert ranges
  for (const auto& [elo, ehi] : experts_.ranges) {
    if (ehi <= lo || elo >= k.hi) continue;
    if (elo > lo) {
      comm::View v{g + lo, static_cast<size_t>(elo - lo), comm::dtype_of<S>(), be.mem()};
      k.reqs.push_back(dp_.iall_reduce(v, v, comm::RedOp::kSum));
    }
    lo = std::max(lo, ehi);
  }
  if (lo < k.hi) {
    comm::View v{g + lo, static_cast<size_t>(k.hi - lo), comm::dtype_of<S>(), be.mem()};
    k.reqs.push_back(dp_.iall_reduce(v, v, comm::RedOp::kSum));
  }
}

template <typename S>
void DataParallel<S>::poll() {
  if (next_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t b = 0; b < next_; ++b)
    for (auto& r : buckets_[b].reqs) r->test();
}

template <typename S>
void DataParallel<S>::progress_loop() {
  model_.backend().bind_thread();  // NCCL and CUDA-aware MPI tests touch the rank's GPU
  while (!stop_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& k : buckets_)
        for (auto& r : k.reqs) r->test();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

template <typename S>
void DataParallel<S>::finish() {
  armed_ = false;
  while (next_ < buckets_.size()) post(next_++);
  for (auto& k : buckets_) {
    std::vector<std::unique_ptr<comm::Request>> reqs;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reqs = std::move(k.reqs);
      k.reqs.clear();
    }
    for (auto& r : reqs) r->wait_on(model_.backend().stream());  // the optimizer's stream waits, not the host
  }
  next_ = 0;  // the next step posts from the first bucket again
  // The expert tensors: over the expert data-parallel group, after the dense buckets.
  if (experts_.edp == nullptr || experts_.edp->size() < 2) return;
  Backend<S>& be = model_.backend();
  experts_.edp->order_after(be.stream());
  for (const auto& [lo, hi] : experts_.ranges) {
    comm::View v{model_.grads() + lo, static_cast<size_t>(hi - lo), comm::dtype_of<S>(), be.mem()};
    experts_.edp->all_reduce(v, v, comm::RedOp::kSum);
  }
  experts_.edp->order_before(be.stream());
}

template class DataParallel<float>;

void validate_data_parallel(const Plan& p) {
  if (p.bucket_mb < 0)
    throw core::UsageError(fmt::format("--bucket-mb {}: must be >= 0 (0: the default rule)", p.bucket_mb));
}

int64_t bucket_elements(const Plan& p, int64_t grad_elements, int scalar_bytes) {
  int64_t n;
  if (p.bucket_mb > 0) {
    n = static_cast<int64_t>(p.bucket_mb * 1024.0 * 1024.0 / scalar_bytes);
  } else {
    constexpr int64_t kMin = 16 * 1024, kMax = 40'000'000;  // Megatron's 40 M is the cap
    n = std::clamp((grad_elements + 3) / 4, kMin, kMax);
  }
  n = std::max<int64_t>(64, (n + 63) / 64 * 64);
  return n;
}

}  // namespace meshbench::parallel
