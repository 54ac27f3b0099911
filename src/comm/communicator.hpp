// The Communicator interface: one process group on one backend (MPI or NCCL), in the
// manner of PyTorch c10d's ProcessGroup and ggml's backends. Drivers ask `unsupported()`
// before calling and skip what a backend cannot do; calls take typed Views and derive
// element counts from them. Not here: buffer management, data checking, timing policy.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <utility>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/types.hpp"

namespace meshbench::comm {

enum class Backend { kMpi, kNccl };
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kSendRecv, kAllToAllV };

std::string_view name(Backend b);
std::string_view name(Collective c);

// nccl-tests' bus factor, busbw / algbw, for a group of n ranks: what each rank sends on its
// busiest link per byte of the call's size, for the bandwidth-optimal (ring) algorithm.
// all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n (all_to_allv: nominal,
// equal blocks); broadcast, sendrecv 1. The suite's one definition: the collective binaries'
// busbw, the trace's wire bytes and every strategy's analytic bytes use it (docs/metrics.md).
double bus_factor(Collective c, int n);

// Timestamps on the communicator's own timeline: host monotonic clock for MPI, CUDA events
// on the NCCL stream. mark(i) records point i; after sync(), elapsed(i, j) is seconds.
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void mark(int i) = 0;
  virtual void sync() = 0;
  virtual double elapsed(int i, int j) const = 0;
};

// A posted non-blocking call (MPI_I*, or NCCL work enqueued on the communicator's stream
// with an event behind it). test() drives progress and says whether the call has completed;
// wait() blocks until it has. Destroying a request that has not completed waits for it.
// wait_on(consumer) is the wait of a device consumer (issue 44, item 10): the work queued next
// on the compute stream `consumer` (an opaque cudaStream_t) runs after the call, and the host
// does not block (NCCL: the stream waits on the request's event); the request then counts as
// complete. Host backends, and a null consumer (the host reads next), wait().
class Request {
 public:
  virtual ~Request() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
  virtual void wait_on(void* consumer) {
    (void)consumer;
    wait();
  }
};

// All-to-all-v (issue 13): this rank's per-peer blocks of one buffer, in elements, one entry
// per rank of the group: counts[p] elements starting at displs[p].
struct PeerBlocks {
  std::vector<std::size_t> counts, displs;
  std::size_t total() const;  // sum of counts
  // Blocks packed back to back in rank order (displs = exclusive prefix sums of counts).
  static PeerBlocks packed(std::vector<std::size_t> counts);
};
// Elements this rank sends to the other ranks (its own block stays local): the bytes a call
// puts on the wire are sent_to_peers(...) * element size.
std::size_t sent_to_peers(const PeerBlocks& send, int rank);
// Throws core::UsageError naming all_to_allv when `b` has not `ranks` entries or a block
// leaves `v` (`side`: "send" or "recv").
void check_blocks(const PeerBlocks& b, const View& v, int ranks, const char* side);

// Calls captured by Communicator::capture, replayed on the communicator's stream.
class Captured {
 public:
  virtual ~Captured() = default;
  virtual void launch() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual Backend backend() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  const std::string& group_name() const { return group_; }
  MPI_Comm mpi_comm() const { return mpi_; }  // the MPI group this communicator spans

  // Why this backend cannot run the call, or nullopt if it can. `op` is empty for
  // collectives without a reduction.
  virtual std::optional<std::string> unsupported(Collective c, DType t, std::optional<RedOp> op,
                                                 bool inplace, compute::MemKind mem) const = 0;

  // In-place reduce-scatter: the element offset, inside the full input buffer, where this
  // rank's result lands (MPI_IN_PLACE: 0; NCCL: rank * recv_count).
  virtual std::size_t reduce_scatter_inplace_offset(std::size_t recv_count) const = 0;

  // In-place forms: all_reduce/all_to_all/broadcast/sendrecv with send.data == recv.data;
  // all_gather with send == recv.slice(rank * send.count, send.count); reduce_scatter with
  // recv at reduce_scatter_inplace_offset() inside send.
  virtual void all_reduce(View send, View recv, RedOp op) = 0;
  virtual void all_gather(View send, View recv) = 0;
  virtual void reduce_scatter(View send, View recv, RedOp op) = 0;
  virtual void all_to_all(View send, View recv) = 0;           // equal blocks of recv.count / size
  virtual void broadcast(View send, View recv, int root) = 0;  // send is read on root only
  virtual void sendrecv(View send, int to, View recv, int from) = 0;

  // Non-blocking forms (the buffers must stay untouched until the request completes). Device
  // views are read only after order_after() has been called for the stream that wrote them.
  virtual std::unique_ptr<Request> iall_reduce(View send, View recv, RedOp op) = 0;
  virtual std::unique_ptr<Request> iall_gather(View send, View recv) = 0;
  virtual std::unique_ptr<Request> ireduce_scatter(View send, View recv, RedOp op) = 0;
  // Point-to-point, non-blocking (pipeline parallel: activations forward, gradients back).
  // `to`/`from` are ranks of this group; `tag` pairs a send with its receive (MPI matches by
  // it; NCCL ignores it and pairs the calls of two ranks in posting order). The buffer stays
  // untouched until the request completes; a device send reads only after order_after().
  virtual std::unique_ptr<Request> isend(View send, int to, int tag) = 0;
  virtual std::unique_ptr<Request> irecv(View recv, int from, int tag) = 0;
  // A send and a receive posted as one exchange, each with its own peer and tag (pipeline
  // parallel's "send the activation, receive the gradient"): MPI an isend and an irecv; NCCL
  // one group, so that neither waits behind the other on the stream (single ungrouped
  // ncclSend/ncclRecv of two stages facing each other deadlock once the message exceeds
  // NCCL's buffers). Returns {the send's request, the receive's}.
  virtual std::pair<std::unique_ptr<Request>, std::unique_ptr<Request>> isend_irecv(View send, int to, int send_tag,
                                                                                  View recv, int from, int recv_tag) {
    auto s = isend(send, to, send_tag);
    return {std::move(s), irecv(recv, from, recv_tag)};
  }
  // A ring step, non-blocking: `send` to rank `to` while receiving `recv` from rank `from`
  // (MPI_Isend + MPI_Irecv with `tag`; NCCL a grouped send and receive on its stream).
  virtual std::unique_ptr<Request> isendrecv(View send, int to, View recv, int from, int tag) = 0;
  // Orders the following calls after everything already queued on the compute stream
  // `producer` (an opaque cudaStream_t; null: host compute, nothing queued). NCCL: an event
  // its stream waits on; MPI with device buffers: a synchronisation before staging.
  virtual void order_after(void* producer) = 0;
  // The converse: the work queued next on the compute stream `consumer` runs after every call
  // already queued here (an opaque cudaStream_t; null: the host reads next). NCCL: an event
  // recorded on its stream that `consumer` waits on, so the host does not block (null: the
  // stream is synchronised); host backends: nothing, their blocking calls are complete when
  // they return. Every consumer of a blocking call's result that nothing else orders (an
  // optimizer, a download, the next step's zeroing) needs it (issue 44, item 5).
  virtual void order_before(void* consumer) = 0;
  // The opaque cudaStream_t the calls are queued on (NCCL), null for host backends: where the
  // trace records a call's device timestamps (compute::DeviceClock, issue 44, item 6).
  virtual void* stream() const { return nullptr; }

  // All-to-all-v: rank r sends send[send_blocks.displs[p], + counts[p]) to rank p and receives
  // rank p's block for r into recv at recv_blocks.displs[p]. recv_blocks.counts[p] must equal
  // what p sends to r (the caller exchanges counts first). Out of place only; blocking as
  // all_to_all (NCCL: grouped send/recv queued on the communicator's stream).
  virtual void all_to_allv(View send, const PeerBlocks& send_blocks, View recv, const PeerBlocks& recv_blocks) = 0;

  // The calls `enqueue` makes on this communicator, captured once (nothing runs) for replay
  // by launch(): NCCL a CUDA graph on its stream (nccl-tests' -G); null where the backend
  // cannot capture (host backends).
  virtual std::unique_ptr<Captured> capture(const std::function<void()>& enqueue) = 0;

  virtual void barrier() = 0;        // all ranks of this group, after local work completes
  virtual void synchronize() = 0;    // wait until every call issued so far has completed
  virtual std::unique_ptr<Timer> make_timer(int marks) = 0;

 protected:
  Communicator(MPI_Comm mpi, std::string group) : mpi_(mpi), group_(std::move(group)) {}
  MPI_Comm mpi_;
  std::string group_;
};

// Backends. `mpi` is borrowed, not freed. `device` is the GPU for NCCL (local rank % count).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm mpi, std::string group);
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm mpi, std::string group, int device);

bool built_with_nccl();
std::string nccl_version();  // "2.28.9", or "none" when built without NCCL

}  // namespace meshbench::comm
