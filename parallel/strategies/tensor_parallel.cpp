#include "tensor_parallel.hpp"

#include <type_traits>

namespace meshbench::parallel {

template <typename S>
TpGroup<S>::TpGroup(comm::Communicator& comm, Backend<S>& be, TraceTags* tags) : comm_(comm), be_(be), tags_(tags) {}

template <typename S>
comm::View TpGroup<S>::view(const S* p, int64_t n) const {
  return {const_cast<S*>(p), static_cast<std::size_t>(n), std::is_same_v<S, float> ? comm::DType::kFloat : comm::DType::kDouble,
          be_.mem()};
}

template <typename S>
void TpGroup<S>::done() {
  comm_.synchronize();  // NCCL queues on its own stream; MPI's blocking calls are complete
}

template <typename S>
void TpGroup<S>::all_reduce(S* x, int64_t n) {
  comm_.order_after(be_.stream());
  comm_.all_reduce(view(x, n), view(x, n), comm::RedOp::kSum);
  done();
}

template <typename S>
void TpGroup<S>::all_reduce_max(S* x, int64_t n) {
  comm_.order_after(be_.stream());
  comm_.all_reduce(view(x, n), view(x, n), comm::RedOp::kMax);
  done();
}

template <typename S>
void TpGroup<S>::all_gather(S* full, const S* part, int64_t n_part) {
  comm_.order_after(be_.stream());
  comm_.all_gather(view(part, n_part), view(full, n_part * size()));
  done();
}

template <typename S>
void TpGroup<S>::reduce_scatter(S* part, const S* full, int64_t n_part) {
  comm_.order_after(be_.stream());
  comm_.reduce_scatter(view(full, n_part * size()), view(part, n_part), comm::RedOp::kSum);
  done();
}

template <typename S>
int TpGroup<S>::keep(std::unique_ptr<comm::Request> r) {
  for (size_t i = 0; i < pending_.size(); ++i)
    if (!pending_[i]) {
      pending_[i] = std::move(r);
      return static_cast<int>(i);
    }
  pending_.push_back(std::move(r));
  return static_cast<int>(pending_.size() - 1);
}

template <typename S>
int TpGroup<S>::post_all_reduce(S* x, int64_t n) {
  comm_.order_after(be_.stream());
  return keep(comm_.iall_reduce(view(x, n), view(x, n), comm::RedOp::kSum));
}

template <typename S>
int TpGroup<S>::post_all_gather(S* full, const S* part, int64_t n_part) {
  comm_.order_after(be_.stream());
  return keep(comm_.iall_gather(view(part, n_part), view(full, n_part * size())));
}

template <typename S>
int TpGroup<S>::post_reduce_scatter(S* part, const S* full, int64_t n_part) {
  comm_.order_after(be_.stream());
  return keep(comm_.ireduce_scatter(view(full, n_part * size()), view(part, n_part), comm::RedOp::kSum));
}

template <typename S>
void TpGroup<S>::wait(int handle) {
  auto& r = pending_.at(static_cast<size_t>(handle));
  r->wait();
  r.reset();
}

template class TpGroup<float>;

std::vector<AnalyticBytes> tp_analytic(const Plan& p, int sb) {
  const int t = p.degrees.tp;
  if (t <= 1) return {};
  const GptConfig& c = p.model;
  const uint64_t m = static_cast<uint64_t>(p.micro_batches), L = static_cast<uint64_t>(c.layers);
  const uint64_t N = static_cast<uint64_t>(c.micro_batch) * static_cast<uint64_t>(c.seq), C = static_cast<uint64_t>(c.hidden);
  const uint64_t act = N * C * static_cast<uint64_t>(sb);  // one b x s x h activation
  const uint64_t ce = 3 * N * static_cast<uint64_t>(sb);   // max, sum of exponentials, target logit
  auto row = [&](comm::Collective k, uint64_t payload) {
    return AnalyticBytes{"tp", std::string(comm::name(k)), payload, wire_bytes(k, payload, t) * 1.0};
  };
  if (!p.sp)  // per layer: proj, fcproj forward; qkv, fc input gradients; + embedding, head
    return {row(comm::Collective::kAllReduce, m * ((4 * L + 2) * act + ce))};
  const uint64_t r = p.sp_regather ? 1 : 0, a16 = (C + 15) / 16 * 16;
  // Norm gradients once per step: per block ln1, ln2 (weight, bias), then lnf (its range, 16-aligned).
  const uint64_t norms = (L * (3 * a16 + C) + a16 + C) * static_cast<uint64_t>(sb);
  // all-gathers per micro-batch: 2 forward + 2 backward (+ 2 re-gathers) per layer, the head's
  // input (+ its re-gather), the embedding's backward; reduce-scatters: 4 per layer, the
  // embedding's output and the head's input gradient.
  const uint64_t ag = (L * (4 + 2 * r) + 2 + r) * act, rs = (4 * L + 2) * act;
  return {row(comm::Collective::kAllReduce, m * ce + norms), row(comm::Collective::kAllGather, m * ag),
          row(comm::Collective::kReduceScatter, m * rs)};
}

}  // namespace meshbench::parallel
