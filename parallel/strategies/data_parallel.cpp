#include "data_parallel.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/core.h>

namespace meshbench::parallel {

namespace {
template <typename S>
comm::DType dtype_of() {
  return sizeof(S) == 8 ? comm::DType::kDouble : comm::DType::kFloat;
}
}  // namespace

template <typename S>
DataParallel<S>::DataParallel(Gpt<S>& model, comm::Communicator& dp, const Plan& plan,
                              TraceTags* tags)
    : model_(model), dp_(dp), plan_(plan), tags_(tags) {
  const int64_t P = model.layout().total();
  bucket_elems_ = parallel::bucket_elements(plan, P, static_cast<int>(sizeof(S)));
  for (int64_t hi = P; hi > 0; hi -= bucket_elems_) buckets_.push_back({std::max<int64_t>(0, hi - bucket_elems_), hi, nullptr});
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
  return static_cast<uint64_t>(model_.layout().total()) * sizeof(S);
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
  return fmt::format("data parallel: {} gradient buckets of up to {} elements, all-reduced over dp x cp = {}{}",
                     buckets_.size(), bucket_elems_, dp_.size(),
                     plan_.overlap ? ", overlapped with the backward" : ", after the backward (--no-overlap)");
}

template <typename S>
std::vector<AnalyticBytes> DataParallel<S>::analytic() const {
  const uint64_t payload = grad_bytes();
  const int d = dp_.size();
  return {{"dp", "all_reduce", payload, 2.0 * (d - 1) / d * static_cast<double>(payload)}};
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
  comm::View v{g + k.lo, static_cast<size_t>(k.hi - k.lo), dtype_of<S>(), be.mem()};
  std::lock_guard<std::mutex> lock(mu_);
  k.req = dp_.iall_reduce(v, v, comm::RedOp::kSum);
}

template <typename S>
void DataParallel<S>::poll() {
  if (next_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t b = 0; b < next_; ++b)
    if (buckets_[b].req) buckets_[b].req->test();
}

template <typename S>
void DataParallel<S>::progress_loop() {
  while (!stop_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& k : buckets_)
        if (k.req) k.req->test();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

template <typename S>
void DataParallel<S>::finish() {
  armed_ = false;
  while (next_ < buckets_.size()) post(next_++);
  for (auto& k : buckets_) {
    std::unique_ptr<comm::Request> req;
    {
      std::lock_guard<std::mutex> lock(mu_);
      req = std::move(k.req);
    }
    if (req) req->wait();
  }
  next_ = 0;  // the next step posts from the first bucket again
}

template class DataParallel<float>;

}  // namespace meshbench::parallel
