// The trace of a parallel step: every compute op (from the model), every communication call
// (from RecordingComm, a wrapper around the Communicator that every strategy talks through,
// so no call escapes the accounting) and the phase spans of each step, all on this rank's
// steady clock. Metrics (metrics.hpp), HDF5 events and the Perfetto file read only this.
// Not here: what the numbers mean (metrics.hpp) or how they are written (report/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "compute/device.hpp"
#include "common/op.hpp"

namespace meshbench::parallel {

// What the executor is doing now; every recorded call takes these tags.
struct TraceTags {
  int step = 0, micro = 0, layer = -1;
  int chunk = 0;     // model chunk (pipeline virtual stage on this rank)
  char phase = 'F';  // F forward, B backward, G gradient sync after the backward, O optimizer
};

struct CommEvent {
  TraceTags tags;
  std::string dim;            // "dp" (later tp, cp, ep, pp, zero)
  comm::Collective kind;
  int group = 0;              // the group's id among the groups of its kind
  int group_size = 1;
  uint64_t bytes = 0;         // payload S as nccl-tests sizes it (all-reduce: the buffer)
  double wire_bytes = 0;      // bytes each rank sends with the bandwidth-optimal algorithm
  double t_post = 0, t_start = 0, t_end = 0;  // seconds; t_end: completion observed
  // When the rank began to wait for it: t_start for a blocking call; for a posted one the
  // wait() that blocked on it, or t_end when a test() found it complete (it never blocked).
  // A posted call also held the rank while it was being posted, [t_post, t_posted] (MPI may
  // copy or hand over a message there). Those are the times the critical path stood still on
  // this call: [t_wait, t_end], and for a posted one [t_post, t_posted] too.
  double t_wait = 0, t_posted = 0;
  bool blocking = true;
  // Point-to-point (dim "pp"): 's' send, 'r' receive, 0 for collectives; the peer's rank in
  // the group and the tag that pairs the two sides. A receive's [t_post, t_end] holds its wait
  // (before the peer posted the send) and its transfer; metrics split them with the sender's
  // t_post, exchanged after the run (pp_receive_split in metrics.hpp).
  char p2p = 0;
  int peer = -1, tag = -1;
  // On a device communicator (issue 44, item 6): DeviceClock marks on its stream just before
  // the call (after the stream's wait for the compute it reads, order_after) and behind it,
  // and on the compute stream where it waited for the call (wait_on; -1: never waited).
  // Trace::resolve_marks sets t_post = t_start = t_posted from the first, t_end from the
  // second, t_wait from the third (never before the start, never after the end).
  int mark_start = -1, mark_end = -1, mark_wait = -1;
};

// The stored activations of a pipeline rank: after every forward and backward of a chunk,
// how many micro-batches' activations the rank holds and their bytes.
struct SlotSample {
  int step;
  double t;
  int held;
  int64_t bytes;
  int mark = -1;  // DeviceClock mark of t on a device
};

// One forward or backward of a model chunk for a micro-batch (pipeline timelines).
struct PassSpan {
  int step, micro, chunk;
  char phase;  // 'F' or 'B'
  double t0, t1;
  int mark0 = -1, mark1 = -1;  // DeviceClock marks of t0, t1 on a device
};

struct PhaseSpan {
  int step;
  std::string name;  // forward, backward, grad_sync, optimizer
  double t0, t1;
};

struct Trace {
  bool on = false;  // record only the timed steps
  TraceTags tags;
  std::vector<OpEvent> ops;
  std::vector<CommEvent> comms;
  std::vector<PhaseSpan> phases;
  std::vector<SlotSample> slots;  // pipeline parallel only
  std::vector<PassSpan> passes;   // pipeline parallel only
  std::vector<double> step_start, step_end;  // per timed step, this rank's clock
  // A device step's clock (the executor makes it): op, call, pass and phase times are CUDA
  // events on the streams that run them, read after the step (issue 44, item 6). Null on
  // the host, where every time is the host clock's.
  std::shared_ptr<compute::DeviceClock> clock;

  void phase(const std::string& name, double t0, double t1) {
    if (on) phases.push_back({tags.step, name, t0, t1});
  }
  // The clock's mark on `stream`, or -1 when the trace is off or has no clock.
  int mark(void* stream) const { return on && clock && stream ? clock->mark(stream) : -1; }
  // Where each kind of record stands now: resolve_marks(from) sets the times of the records
  // appended since from their marks, once clock->resolve() has read them.
  struct Sizes {
    size_t ops = 0, comms = 0, passes = 0, slots = 0;
  };
  Sizes sizes() const { return {ops.size(), comms.size(), passes.size(), slots.size()}; }
  void resolve_marks(const Sizes& from);
};

// Per-rank bytes of one call with the bandwidth-optimal algorithm (docs/collectives.md's bus factors): all-reduce
// 2(n-1)/n S, all-gather and reduce-scatter (n-1)/n S (S the full buffer), all-to-all
// (n-1)/n S, broadcast and send/recv S; all-to-all-v: (n-1)/n S for equal blocks (RecordingComm
// records the exact bytes of each call).
double wire_bytes(comm::Collective c, uint64_t payload, int n);

// Records every call of `inner` into `trace` under dimension `dim` and group `group_id`.
// Blocking calls are timed around the call; on device memory with the trace's clock, by
// events on the inner communicator's stream before and behind the call, so the time covers
// the transfer, not its enqueue nor the compute its stream waited for, and the host never
// waits (issue 44, items 6 and 10); non-blocking ones from posting to the moment a test() or wait() first sees them
// complete (t_start = t_post: MPI cannot say when the transfer began), with the moment a
// wait() began to block. A group of one rank issues no
// call and records nothing: its collectives are the identity (a copy out of place).
class RecordingComm final : public comm::Communicator {
 public:
  RecordingComm(std::unique_ptr<comm::Communicator> inner, Trace& trace, std::string dim,
                int group_id);

  comm::Backend backend() const override { return inner_->backend(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::optional<std::string> unsupported(comm::Collective c, comm::DType t,
                                         std::optional<comm::RedOp> op, bool inplace,
                                         compute::MemKind mem) const override {
    return inner_->unsupported(c, t, op, inplace, mem);
  }
  std::size_t reduce_scatter_inplace_offset(std::size_t n) const override {
    return inner_->reduce_scatter_inplace_offset(n);
  }
  void all_reduce(comm::View s, comm::View r, comm::RedOp op) override;
  void all_gather(comm::View s, comm::View r) override;
  void reduce_scatter(comm::View s, comm::View r, comm::RedOp op) override;
  void all_to_all(comm::View s, comm::View r) override;
  void broadcast(comm::View s, comm::View r, int root) override;
  void sendrecv(comm::View s, int to, comm::View r, int from) override;
  std::unique_ptr<comm::Request> iall_reduce(comm::View s, comm::View r, comm::RedOp op) override;
  std::unique_ptr<comm::Request> iall_gather(comm::View s, comm::View r) override;
  std::unique_ptr<comm::Request> isendrecv(comm::View s, int to, comm::View r, int from, int tag) override;
  std::pair<std::unique_ptr<comm::Request>, std::unique_ptr<comm::Request>> isend_irecv(comm::View s, int to, int send_tag,
                                                                                      comm::View r, int from,
                                                                                      int recv_tag) override;
  std::unique_ptr<comm::Request> ireduce_scatter(comm::View s, comm::View r, comm::RedOp op) override;
  std::unique_ptr<comm::Request> isend(comm::View s, int to, int tag) override;
  std::unique_ptr<comm::Request> irecv(comm::View r, int from, int tag) override;
  void order_after(void* producer) override { inner_->order_after(producer); }
  void order_before(void* consumer) override { inner_->order_before(consumer); }
  void* stream() const override { return inner_->stream(); }
  std::unique_ptr<comm::Captured> capture(const std::function<void()>& enqueue) override {
    return inner_->capture(enqueue);
  }
  // Recorded with bytes = everything this rank's blocks hold (its own included) and
  // wire_bytes = the bytes it actually sends to other ranks.
  void all_to_allv(comm::View s, const comm::PeerBlocks& sb, comm::View r, const comm::PeerBlocks& rb) override;
  void barrier() override { inner_->barrier(); }
  void synchronize() override { inner_->synchronize(); }
  std::unique_ptr<comm::Timer> make_timer(int marks) override { return inner_->make_timer(marks); }

 private:
  // A group of one: true when the call needs nothing more (in place, or host memory copied
  // here); false leaves device memory to the inner call (which blocking()/posted() then do
  // not record).
  bool alone(comm::View s, comm::View r);
  // `wire` < 0: wire_bytes(c, bytes, n). `mem`: where the call's buffers live.
  template <typename F>
  void blocking(comm::Collective c, uint64_t bytes, compute::MemKind mem, F&& call, double wire = -1);
  // `mark`: the DeviceClock mark taken on the inner stream before the call (-1: none).
  std::unique_ptr<comm::Request> posted(comm::Collective c, uint64_t bytes,
                                        std::unique_ptr<comm::Request> inner, double t_post, int mark,
                                        char p2p = 0, int peer = -1, int tag = -1);
  int mark(compute::MemKind mem) const {  // on the inner communicator's stream (device memory only)
    return mem == compute::MemKind::kDevice ? trace_.mark(inner_->stream()) : -1;
  }
  std::unique_ptr<comm::Communicator> inner_;
  Trace& trace_;
  std::string dim_;
  int group_id_;
};

}  // namespace meshbench::parallel
