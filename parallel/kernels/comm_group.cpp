#include "kernels/comm_group.hpp"

#include <type_traits>

namespace meshbench::parallel {

template <typename S>
CommGroup<S>::CommGroup(comm::Communicator& comm, Backend<S>& be, TraceTags* tags) : comm_(comm), be_(be), tags_(tags) {}

template <typename S>
comm::View CommGroup<S>::view(const S* p, int64_t n) const {
  return {const_cast<S*>(p), static_cast<std::size_t>(n), comm::dtype_of<S>(),
          be_.mem()};
}

// The backend's next op runs after the call: on NCCL its stream waits on an event behind the
// call (no host wait; issue 44, item 10); MPI's blocking calls are complete already.
template <typename S>
void CommGroup<S>::done() {
  comm_.order_before(be_.stream());
}

template <typename S>
void CommGroup<S>::all_reduce(S* x, int64_t n) {
  comm_.order_after(be_.stream());
  comm_.all_reduce(view(x, n), view(x, n), comm::RedOp::kSum);
  done();
}

template <typename S>
void CommGroup<S>::all_reduce_max(S* x, int64_t n) {
  comm_.order_after(be_.stream());
  comm_.all_reduce(view(x, n), view(x, n), comm::RedOp::kMax);
  done();
}

template <typename S>
void CommGroup<S>::all_gather(S* full, const S* part, int64_t n_part) {
  comm_.order_after(be_.stream());
  comm_.all_gather(view(part, n_part), view(full, n_part * size()));
  done();
}

template <typename S>
void CommGroup<S>::reduce_scatter(S* part, const S* full, int64_t n_part) {
  comm_.order_after(be_.stream());
  comm_.reduce_scatter(view(full, n_part * size()), view(part, n_part), comm::RedOp::kSum);
  done();
}

template <typename S>
void CommGroup<S>::all_to_all(S* recv, const S* send, int64_t n_block) {
  comm_.order_after(be_.stream());
  comm_.all_to_all(view(send, n_block * size()), view(recv, n_block * size()));
  done();
}

// Expert parallel's dispatch and combine: packed blocks of data-dependent sizes.
template <typename S>
void CommGroup<S>::all_to_allv(S* recv, const std::vector<int64_t>& recv_n, const S* send,
                               const std::vector<int64_t>& send_n) {
  auto blocks = [](const std::vector<int64_t>& n) {
    return comm::PeerBlocks::packed(std::vector<std::size_t>(n.begin(), n.end()));
  };
  const comm::PeerBlocks sb = blocks(send_n), rb = blocks(recv_n);
  comm_.order_after(be_.stream());
  comm_.all_to_allv(view(send, static_cast<int64_t>(sb.total())), sb, view(recv, static_cast<int64_t>(rb.total())), rb);
  done();
}

template <typename S>
int CommGroup<S>::keep(std::unique_ptr<comm::Request> r) {
  for (size_t i = 0; i < pending_.size(); ++i)
    if (!pending_[i]) {
      pending_[i] = std::move(r);
      return static_cast<int>(i);
    }
  pending_.push_back(std::move(r));
  return static_cast<int>(pending_.size() - 1);
}

template <typename S>
int CommGroup<S>::post_all_reduce(S* x, int64_t n) {
  comm_.order_after(be_.stream());
  return keep(comm_.iall_reduce(view(x, n), view(x, n), comm::RedOp::kSum));
}

template <typename S>
int CommGroup<S>::post_all_gather(S* full, const S* part, int64_t n_part) {
  comm_.order_after(be_.stream());
  return keep(comm_.iall_gather(view(part, n_part), view(full, n_part * size())));
}

template <typename S>
int CommGroup<S>::post_reduce_scatter(S* part, const S* full, int64_t n_part) {
  comm_.order_after(be_.stream());
  return keep(comm_.ireduce_scatter(view(full, n_part * size()), view(part, n_part), comm::RedOp::kSum));
}

template <typename S>
int CommGroup<S>::post_exchange(const S* send, int to, S* recv, int from, int64_t n) {
  comm_.order_after(be_.stream());
  constexpr int kTag = 4343;  // one exchange at a time per pair of ranks: posted ones are waited in order
  return keep(comm_.isendrecv(view(send, n), to, view(recv, n), from, kTag));
}

template <typename S>
void CommGroup<S>::wait(int handle) {
  if (handle < 0) return;  // nothing posted
  auto& r = pending_.at(static_cast<size_t>(handle));
  r->wait_on(be_.stream());  // the compute stream waits (NCCL); the host only for host compute
  r.reset();
}

template class CommGroup<float>;

}  // namespace meshbench::parallel
