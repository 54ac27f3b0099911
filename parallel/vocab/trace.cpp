#include "vocab/trace.hpp"

#include <algorithm>
#include <cstring>

#include "core/timer.hpp"

namespace meshbench::parallel {

using comm::Collective;
using comm::View;

double wire_bytes(Collective c, uint64_t payload, int n) {
  const double S = static_cast<double>(payload), f = n > 0 ? double(n - 1) / n : 0.0;
  switch (c) {
    case Collective::kAllReduce: return 2 * f * S;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
    case Collective::kAllToAllV: return f * S;
    case Collective::kBroadcast:
    case Collective::kSendRecv: return n > 1 ? S : 0.0;
  }
  return 0;
}

namespace {
// A call a group of one answered locally: complete from the start.
class DoneRequest final : public comm::Request {
 public:
  bool test() override { return true; }
  void wait() override {}
};

// Completion is stamped into the trace the first time the inner request reports it.
class RecordedRequest final : public comm::Request {
 public:
  RecordedRequest(std::unique_ptr<comm::Request> inner, Trace& trace, std::ptrdiff_t index)
      : inner_(std::move(inner)), trace_(trace), index_(index) {}
  ~RecordedRequest() override {
    if (!done_) wait();
  }
  bool test() override {
    if (done_) return true;
    if (inner_->test()) stamp(-1);
    return done_;
  }
  void wait() override {
    if (done_) return;
    const double t_wait = core::now_seconds();
    inner_->wait();
    stamp(t_wait);
  }

 private:
  void stamp(double t_wait) {  // t_wait < 0: found complete by a test(), never blocked on
    done_ = true;
    if (index_ < 0) return;
    CommEvent& e = trace_.comms[static_cast<size_t>(index_)];
    e.t_end = core::now_seconds();
    e.t_wait = t_wait < 0 ? e.t_end : t_wait;
  }
  std::unique_ptr<comm::Request> inner_;
  Trace& trace_;
  std::ptrdiff_t index_;
  bool done_ = false;
};
}  // namespace

RecordingComm::RecordingComm(std::unique_ptr<comm::Communicator> inner, Trace& trace,
                             std::string dim, int group_id)
    : Communicator(inner->mpi_comm(), inner->group_name()),
      inner_(std::move(inner)),
      trace_(trace),
      dim_(std::move(dim)),
      group_id_(group_id) {}

bool RecordingComm::alone(View s, View r) {
  if (inner_->size() != 1) return false;
  if (s.data == r.data || r.bytes() == 0) return true;  // in place: the identity
  if (r.mem == compute::MemKind::kHost) {
    std::memcpy(r.data, s.data, std::min(s.bytes(), r.bytes()));
    return true;
  }
  return false;  // device memory: the inner communicator copies on its stream, unrecorded
}

template <typename F>
void RecordingComm::blocking(Collective c, uint64_t bytes, compute::MemKind mem, F&& call, double wire) {
  if (inner_->size() == 1) {  // a group of one: nothing to record (alone() did the copy, or the call does)
    call();
    return;
  }
  const double t0 = core::now_seconds();
  call();
  // A device communicator (NCCL) returns once the call is queued on its stream: wait for it,
  // so that busy and exposed time are the transfer's (issue 30, defect 5).
  if (trace_.on && mem == compute::MemKind::kDevice) inner_->synchronize();
  const double t1 = core::now_seconds();
  if (!trace_.on) return;
  const int n = inner_->size();
  trace_.comms.push_back({trace_.tags, dim_, c, group_id_, n, bytes, wire < 0 ? wire_bytes(c, bytes, n) : wire, t0, t0,
                          t1, t0, t0, true});
}

std::unique_ptr<comm::Request> RecordingComm::posted(Collective c, uint64_t bytes,
                                                     std::unique_ptr<comm::Request> inner,
                                                     double t_post, char p2p, int peer, int tag) {
  if (inner_->size() == 1) return inner;  // a group of one: nothing to record
  const double t_posted = core::now_seconds();  // the inner call has returned
  std::ptrdiff_t index = -1;
  if (trace_.on) {
    const int n = inner_->size();
    index = static_cast<std::ptrdiff_t>(trace_.comms.size());
    const double wire = p2p == 'r' ? 0.0 : wire_bytes(c, bytes, n);  // a receive sends nothing
    trace_.comms.push_back(
        {trace_.tags, dim_, c, group_id_, n, bytes, wire, t_post, t_post, t_post, t_post, t_posted, false, p2p, peer, tag});
  }
  return std::make_unique<RecordedRequest>(std::move(inner), trace_, index);
}

void RecordingComm::all_reduce(View s, View r, comm::RedOp op) {
  if (alone(s, r)) return;
  blocking(Collective::kAllReduce, r.bytes(), r.mem, [&] { inner_->all_reduce(s, r, op); });
}
void RecordingComm::all_gather(View s, View r) {
  if (alone(s, r)) return;
  blocking(Collective::kAllGather, r.bytes(), r.mem, [&] { inner_->all_gather(s, r); });
}
void RecordingComm::reduce_scatter(View s, View r, comm::RedOp op) {
  if (alone(s, r)) return;
  blocking(Collective::kReduceScatter, s.bytes(), s.mem, [&] { inner_->reduce_scatter(s, r, op); });
}
void RecordingComm::all_to_all(View s, View r) {
  if (alone(s, r)) return;
  blocking(Collective::kAllToAll, s.bytes(), s.mem, [&] { inner_->all_to_all(s, r); });
}
void RecordingComm::all_to_allv(View s, const comm::PeerBlocks& sb, View r, const comm::PeerBlocks& rb) {
  if (alone(s.slice(sb.displs.at(0), sb.counts.at(0)), r.slice(rb.displs.at(0), rb.counts.at(0)))) return;
  const std::size_t elt = comm::size_of(s.dtype);
  blocking(Collective::kAllToAllV, sb.total() * elt, s.mem, [&] { inner_->all_to_allv(s, sb, r, rb); },
           static_cast<double>(comm::sent_to_peers(sb, inner_->rank()) * elt));
}
void RecordingComm::broadcast(View s, View r, int root) {
  if (alone(s, r)) return;
  blocking(Collective::kBroadcast, r.bytes(), r.mem, [&] { inner_->broadcast(s, r, root); });
}
void RecordingComm::sendrecv(View s, int to, View r, int from) {
  blocking(Collective::kSendRecv, s.bytes(), s.mem, [&] { inner_->sendrecv(s, to, r, from); });
}
std::unique_ptr<comm::Request> RecordingComm::iall_reduce(View s, View r, comm::RedOp op) {
  if (alone(s, r)) return std::make_unique<DoneRequest>();
  const double t = core::now_seconds();
  return posted(Collective::kAllReduce, r.bytes(), inner_->iall_reduce(s, r, op), t);
}
std::unique_ptr<comm::Request> RecordingComm::isendrecv(View s, int to, View r, int from, int tag) {
  const double t = core::now_seconds();
  return posted(Collective::kSendRecv, s.bytes(), inner_->isendrecv(s, to, r, from, tag), t);
}
std::unique_ptr<comm::Request> RecordingComm::iall_gather(View s, View r) {
  if (alone(s, r)) return std::make_unique<DoneRequest>();
  const double t = core::now_seconds();
  return posted(Collective::kAllGather, r.bytes(), inner_->iall_gather(s, r), t);
}
std::unique_ptr<comm::Request> RecordingComm::ireduce_scatter(View s, View r, comm::RedOp op) {
  if (alone(s, r)) return std::make_unique<DoneRequest>();
  const double t = core::now_seconds();
  return posted(Collective::kReduceScatter, s.bytes(), inner_->ireduce_scatter(s, r, op), t);
}

// A send's payload is the message; so is a receive's (both sides record it, so the trace of
// each rank holds its own traffic).
std::unique_ptr<comm::Request> RecordingComm::isend(View s, int to, int tag) {
  const double t = core::now_seconds();
  return posted(Collective::kSendRecv, s.bytes(), inner_->isend(s, to, tag), t, 's', to, tag);
}
std::unique_ptr<comm::Request> RecordingComm::irecv(View r, int from, int tag) {
  const double t = core::now_seconds();
  return posted(Collective::kSendRecv, r.bytes(), inner_->irecv(r, from, tag), t, 'r', from, tag);
}
std::pair<std::unique_ptr<comm::Request>, std::unique_ptr<comm::Request>> RecordingComm::isend_irecv(
    View s, int to, int send_tag, View r, int from, int recv_tag) {
  const double t = core::now_seconds();
  auto [sq, rq] = inner_->isend_irecv(s, to, send_tag, r, from, recv_tag);
  auto send = posted(Collective::kSendRecv, s.bytes(), std::move(sq), t, 's', to, send_tag);
  return {std::move(send), posted(Collective::kSendRecv, r.bytes(), std::move(rq), t, 'r', from, recv_tag)};
}

}  // namespace meshbench::parallel
