#include "common/trace.hpp"

#include <algorithm>
#include <cstring>

#include "core/timer.hpp"

namespace meshbench::parallel {

using comm::Collective;
using comm::View;

double wire_bytes(Collective c, uint64_t payload, int n) {
  return n > 1 ? comm::bus_factor(c, n) * static_cast<double>(payload) : 0.0;
}

namespace {
// A call a group of one answered locally: complete from the start.
class DoneRequest final : public comm::Request {
 public:
  bool test() override { return true; }
  void wait() override {}
  void wait_on(void*) override {}
};

// Completion is stamped into the trace the first time the inner request reports it. A call
// timed by device marks (CommEvent::mark_end) takes its times from them after the step;
// wait_on then marks where the consumer stream waited for it.
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
  void wait_on(void* consumer) override {
    if (done_) return;
    if (consumer == nullptr || index_ < 0 || trace_.comms[static_cast<size_t>(index_)].mark_end < 0)
      return wait_on_host(consumer);
    trace_.comms[static_cast<size_t>(index_)].mark_wait = trace_.mark(consumer);
    inner_->wait_on(consumer);
    done_ = true;
  }

 private:
  void wait_on_host(void* consumer) {
    const double t_wait = core::now_seconds();
    inner_->wait_on(consumer);
    stamp(t_wait);
  }
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

void Trace::resolve_marks(const Sizes& from) {
  if (!clock) return;
  auto at = [&](int m, double fallback) { return m >= 0 ? clock->at(m) : fallback; };
  for (size_t i = from.ops; i < ops.size(); ++i) {
    OpEvent& e = ops[i];
    e.t_start = at(e.mark_start, e.t_start);
    e.t_end = at(e.mark_end, e.t_end);
  }
  for (size_t i = from.comms; i < comms.size(); ++i) {
    CommEvent& e = comms[i];
    if (e.mark_start < 0 || e.mark_end < 0) continue;
    e.t_post = e.t_start = e.t_posted = clock->at(e.mark_start);
    e.t_end = std::max(e.t_start, clock->at(e.mark_end));
    // The compute stream waited from mark_wait; a call it never waited for held nothing up.
    e.t_wait = e.blocking ? e.t_start : e.mark_wait >= 0 ? std::clamp(clock->at(e.mark_wait), e.t_start, e.t_end) : e.t_end;
  }
  for (size_t i = from.passes; i < passes.size(); ++i) {
    PassSpan& p = passes[i];
    p.t0 = at(p.mark0, p.t0);
    p.t1 = at(p.mark1, p.t1);
  }
  for (size_t i = from.slots; i < slots.size(); ++i) slots[i].t = at(slots[i].mark, slots[i].t);
}

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
  // A device communicator (NCCL) returns once the call is queued on its stream. With the
  // trace's clock, events before and behind it on that stream time the transfer (issue 44,
  // item 6); without one, the stream is waited for (issue 30, defect 5).
  const int m0 = mark(mem);
  call();
  const int m1 = m0 >= 0 ? mark(mem) : -1;
  if (trace_.on && mem == compute::MemKind::kDevice && m0 < 0) inner_->synchronize();
  const double t1 = core::now_seconds();
  if (!trace_.on) return;
  const int n = inner_->size();
  CommEvent e{trace_.tags, dim_, c, group_id_, n, bytes, wire < 0 ? wire_bytes(c, bytes, n) : wire, t0, t0,
              t1, t0, t0, true};
  e.mark_start = m0;
  e.mark_end = m1;
  trace_.comms.push_back(std::move(e));
}

std::unique_ptr<comm::Request> RecordingComm::posted(Collective c, uint64_t bytes,
                                                     std::unique_ptr<comm::Request> inner,
                                                     double t_post, int m0, char p2p, int peer, int tag) {
  if (inner_->size() == 1) return inner;  // a group of one: nothing to record
  const double t_posted = core::now_seconds();  // the inner call has returned
  const int m1 = m0 >= 0 ? trace_.mark(inner_->stream()) : -1;  // behind the call on its stream
  std::ptrdiff_t index = -1;
  if (trace_.on) {
    const int n = inner_->size();
    index = static_cast<std::ptrdiff_t>(trace_.comms.size());
    const double wire = p2p == 'r' ? 0.0 : wire_bytes(c, bytes, n);  // a receive sends nothing
    trace_.comms.push_back({trace_.tags, dim_, c, group_id_, n, bytes, wire, t_post, t_post, t_post, t_post, t_posted,
                            false, p2p, peer, tag, m0, m1});
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
  const int m = mark(r.mem);
  return posted(Collective::kAllReduce, r.bytes(), inner_->iall_reduce(s, r, op), t, m);
}
std::unique_ptr<comm::Request> RecordingComm::isendrecv(View s, int to, View r, int from, int tag) {
  const double t = core::now_seconds();
  const int m = mark(s.mem);
  return posted(Collective::kSendRecv, s.bytes(), inner_->isendrecv(s, to, r, from, tag), t, m);
}
std::unique_ptr<comm::Request> RecordingComm::iall_gather(View s, View r) {
  if (alone(s, r)) return std::make_unique<DoneRequest>();
  const double t = core::now_seconds();
  const int m = mark(r.mem);
  return posted(Collective::kAllGather, r.bytes(), inner_->iall_gather(s, r), t, m);
}
std::unique_ptr<comm::Request> RecordingComm::ireduce_scatter(View s, View r, comm::RedOp op) {
  if (alone(s, r)) return std::make_unique<DoneRequest>();
  const double t = core::now_seconds();
  const int m = mark(s.mem);
  return posted(Collective::kReduceScatter, s.bytes(), inner_->ireduce_scatter(s, r, op), t, m);
}

// A send's payload is the message; so is a receive's (both sides record it, so the trace of
// each rank holds its own traffic).
std::unique_ptr<comm::Request> RecordingComm::isend(View s, int to, int tag) {
  const double t = core::now_seconds();
  const int m = mark(s.mem);
  return posted(Collective::kSendRecv, s.bytes(), inner_->isend(s, to, tag), t, m, 's', to, tag);
}
std::unique_ptr<comm::Request> RecordingComm::irecv(View r, int from, int tag) {
  const double t = core::now_seconds();
  const int m = mark(r.mem);
  return posted(Collective::kSendRecv, r.bytes(), inner_->irecv(r, from, tag), t, m, 'r', from, tag);
}
std::pair<std::unique_ptr<comm::Request>, std::unique_ptr<comm::Request>> RecordingComm::isend_irecv(
    View s, int to, int send_tag, View r, int from, int recv_tag) {
  const double t = core::now_seconds();
  const int m = mark(s.mem);
  auto [sq, rq] = inner_->isend_irecv(s, to, send_tag, r, from, recv_tag);
  auto send = posted(Collective::kSendRecv, s.bytes(), std::move(sq), t, m, 's', to, send_tag);
  return {std::move(send), posted(Collective::kSendRecv, r.bytes(), std::move(rq), t, m, 'r', from, recv_tag)};
}

}  // namespace meshbench::parallel
