// NCCL backend: device buffers, one GPU per rank (local rank modulo the GPUs a node has),
// the unique id broadcast over the group's MPI communicator, one non-blocking stream, and
// CUDA events for timing. All-to-all is grouped send/recv, as nccl-tests does; NCCL has no
// in-place all-to-all or send/recv. Version #ifs stay in this file. Checks: MB_CHECK_CUDA and
// MB_CHECK_NCCL from core/error.hpp.
// Ordering with copies (issue 17, defect 2): the stream is non-blocking, so nothing orders
// it with the legacy default stream; compute::copy_to_device completes before it returns,
// and synchronize()/barrier() also drain the legacy stream, so a host copy issued before a
// barrier is on the device before the next collective, and a collective finished by
// synchronize() is done before the host overwrites its buffers.
// tests/nccl_fake/nccl_order_test.cpp compiles this file against recording fakes of the CUDA,
// NCCL and MPI calls and checks that order, the in-place offsets and the grouped send/recv
// without a GPU. A call added here that the test does not fake goes to the real library
// there: give it a fake when a test reaches it.
#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace meshbench::comm {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFloat: return ncclFloat32;
    case DType::kDouble: return ncclFloat64;
    case DType::kInt32: return ncclInt32;
    case DType::kInt8: return ncclInt8;
    case DType::kBf16: return ncclBfloat16;
    case DType::kHalf: return ncclFloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(RedOp op) {
  switch (op) {
    case RedOp::kSum: return ncclSum;
    case RedOp::kProd: return ncclProd;
    case RedOp::kMin: return ncclMin;
    case RedOp::kMax: return ncclMax;
    case RedOp::kAvg: return ncclAvg;
  }
  return ncclSum;
}

class EventTimer final : public Timer {
 public:
  EventTimer(int marks, cudaStream_t stream, const std::string& group)
      : stream_(stream), group_(group), ev_(static_cast<size_t>(marks)) {
    for (auto& e : ev_) MB_CHECK_CUDA(cudaEventCreate(&e), group_.c_str());
  }
  ~EventTimer() override {
    for (auto& e : ev_) (void)cudaEventDestroy(e);
  }
  void mark(int i) override {
    MB_CHECK_CUDA(cudaEventRecord(ev_[static_cast<size_t>(i)], stream_), group_.c_str());
  }
  void sync() override { MB_CHECK_CUDA(cudaStreamSynchronize(stream_), group_.c_str()); }
  double elapsed(int i, int j) const override {
    float ms = 0;
    MB_CHECK_CUDA(cudaEventElapsedTime(&ms, ev_[static_cast<size_t>(i)], ev_[static_cast<size_t>(j)]),
                  group_.c_str());
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  cudaStream_t stream_;
  std::string group_;
  std::vector<cudaEvent_t> ev_;
};

// NCCL work already enqueued on the communicator's stream, with an event recorded behind it.
class NcclRequest final : public Request {
 public:
  NcclRequest(cudaStream_t stream, std::string group) : group_(std::move(group)) {
    MB_CHECK_CUDA(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), group_.c_str());
    MB_CHECK_CUDA(cudaEventRecord(ev_, stream), group_.c_str());
  }
  ~NcclRequest() override {
    if (!done_) (void)cudaEventSynchronize(ev_);
    (void)cudaEventDestroy(ev_);
  }
  bool test() override {
    if (done_) return true;
    const cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaErrorNotReady) return false;
    MB_CHECK_CUDA(e, group_.c_str());
    done_ = true;
    return true;
  }
  void wait() override {
    if (done_) return;
    MB_CHECK_CUDA(cudaEventSynchronize(ev_), group_.c_str());
    done_ = true;
  }
  // The consumer stream waits on the event; the host goes on (issue 44, item 10). Destroying
  // the event after this is safe: CUDA releases it once the wait has been satisfied.
  void wait_on(void* consumer) override {
    if (consumer == nullptr) return wait();
    if (done_) return;
    MB_CHECK_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(consumer), ev_, 0), group_.c_str());
    done_ = true;
  }

 private:
  cudaEvent_t ev_ = nullptr;
  std::string group_;
  bool done_ = false;
};

// A CUDA graph of NCCL calls captured on the communicator's stream, launched there.
class NcclGraph final : public Captured {
 public:
  NcclGraph(cudaStream_t stream, const std::function<void()>& enqueue, std::string group)
      : stream_(stream), group_(std::move(group)) {
    const char* g = group_.c_str();
    MB_CHECK_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), g);
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(stream_, &broken);
      if (broken) (void)cudaGraphDestroy(broken);
      throw;
    }
    MB_CHECK_CUDA(cudaStreamEndCapture(stream_, &graph_), g);
#if CUDART_VERSION >= 12000
    MB_CHECK_CUDA(cudaGraphInstantiate(&exec_, graph_, 0), g);
#else
    MB_CHECK_CUDA(cudaGraphInstantiate(&exec_, graph_, nullptr, nullptr, 0), g);
#endif
  }
  ~NcclGraph() override {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    if (graph_) (void)cudaGraphDestroy(graph_);
  }
  void launch() override { MB_CHECK_CUDA(cudaGraphLaunch(exec_, stream_), group_.c_str()); }

 private:
  cudaStream_t stream_;
  std::string group_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm mpi, std::string group, int device) : Communicator(mpi, std::move(group)) {
    const char* g = group_.c_str();
    MB_CHECK_MPI(MPI_Comm_rank(mpi_, &rank_), g);
    MB_CHECK_MPI(MPI_Comm_size(mpi_, &size_), g);
    MB_CHECK_CUDA(cudaSetDevice(device), g);
    ncclUniqueId id{};
    if (rank_ == 0) MB_CHECK_NCCL(ncclGetUniqueId(&id), g);
    MB_CHECK_MPI(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi_), g);
    MB_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), g);
    MB_CHECK_NCCL(ncclCommInitRank(&comm_, size_, id, rank_), g);
    MB_CHECK_CUDA(cudaEventCreateWithFlags(&order_ev_, cudaEventDisableTiming), g);
    MB_CHECK_CUDA(cudaEventCreateWithFlags(&done_ev_, cudaEventDisableTiming), g);
  }
  ~NcclCommunicator() override {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaEventDestroy(order_ev_);
    (void)cudaEventDestroy(done_ev_);
    (void)ncclCommDestroy(comm_);
    (void)cudaStreamDestroy(stream_);
  }

  Backend backend() const override { return Backend::kNccl; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::optional<std::string> unsupported(Collective c, DType, std::optional<RedOp>, bool inplace,
                                         compute::MemKind mem) const override {
    if (mem != compute::MemKind::kDevice) return "backend nccl needs --mem device";
    if (inplace && c == Collective::kAllToAll) return "backend nccl has no in-place all-to-all";
    if (inplace && c == Collective::kSendRecv) return "backend nccl has no in-place send/recv";
    if (inplace && c == Collective::kAllToAllV) return "backend nccl has no in-place all-to-all-v";
    return std::nullopt;
  }

  std::size_t reduce_scatter_inplace_offset(std::size_t recv_count) const override {
    return static_cast<std::size_t>(rank_) * recv_count;
  }

  void all_reduce(View send, View recv, RedOp op) override {
    MB_CHECK_NCCL(ncclAllReduce(send.data, recv.data, recv.count, nccl_type(recv.dtype), nccl_op(op), comm_, stream_),
                  group_.c_str());
  }
  void all_gather(View send, View recv) override {
    MB_CHECK_NCCL(ncclAllGather(send.data, recv.data, send.count, nccl_type(send.dtype), comm_, stream_),
                  group_.c_str());
  }
  void reduce_scatter(View send, View recv, RedOp op) override {
    MB_CHECK_NCCL(ncclReduceScatter(send.data, recv.data, recv.count, nccl_type(recv.dtype), nccl_op(op), comm_,
                                    stream_),
                  group_.c_str());
  }
  void all_to_all(View send, View recv) override {
    size_t block = recv.count / static_cast<size_t>(size_);
    MB_CHECK_NCCL(ncclGroupStart(), group_.c_str());
    for (int p = 0; p < size_; ++p) {
      View s = send.slice(static_cast<size_t>(p) * block, block);
      View r = recv.slice(static_cast<size_t>(p) * block, block);
      MB_CHECK_NCCL(ncclSend(s.data, block, nccl_type(send.dtype), p, comm_, stream_), group_.c_str());
      MB_CHECK_NCCL(ncclRecv(r.data, block, nccl_type(recv.dtype), p, comm_, stream_), group_.c_str());
    }
    MB_CHECK_NCCL(ncclGroupEnd(), group_.c_str());
  }
  void broadcast(View send, View recv, int root) override {
    MB_CHECK_NCCL(ncclBroadcast(send.data, recv.data, recv.count, nccl_type(recv.dtype), root, comm_, stream_),
                  group_.c_str());
  }
  void sendrecv(View send, int to, View recv, int from) override {
    MB_CHECK_NCCL(ncclGroupStart(), group_.c_str());
    MB_CHECK_NCCL(ncclSend(send.data, send.count, nccl_type(send.dtype), to, comm_, stream_), group_.c_str());
    MB_CHECK_NCCL(ncclRecv(recv.data, recv.count, nccl_type(recv.dtype), from, comm_, stream_), group_.c_str());
    MB_CHECK_NCCL(ncclGroupEnd(), group_.c_str());
  }

  std::unique_ptr<Request> iall_reduce(View send, View recv, RedOp op) override {
    all_reduce(send, recv, op);
    return std::make_unique<NcclRequest>(stream_, group_);
  }
  std::unique_ptr<Request> isendrecv(View send, int to, View recv, int from, int) override {
    sendrecv(send, to, recv, from);  // grouped, queued on the stream: the host does not wait
    return std::make_unique<NcclRequest>(stream_, group_);
  }
  std::unique_ptr<Request> iall_gather(View send, View recv) override {
    all_gather(send, recv);
    return std::make_unique<NcclRequest>(stream_, group_);
  }
  std::unique_ptr<Request> ireduce_scatter(View send, View recv, RedOp op) override {
    reduce_scatter(send, recv, op);
    return std::make_unique<NcclRequest>(stream_, group_);
  }
  // Grouped send/recv, one pair per peer with a non-empty block (both sides agree on the counts).
  void all_to_allv(View send, const PeerBlocks& send_blocks, View recv, const PeerBlocks& recv_blocks) override {
    check_blocks(send_blocks, send, size_, "send");
    check_blocks(recv_blocks, recv, size_, "recv");
    MB_CHECK_NCCL(ncclGroupStart(), group_.c_str());
    for (int p = 0; p < size_; ++p) {
      const auto q = static_cast<size_t>(p);
      if (send_blocks.counts[q] > 0) {
        View s = send.slice(send_blocks.displs[q], send_blocks.counts[q]);
        MB_CHECK_NCCL(ncclSend(s.data, s.count, nccl_type(send.dtype), p, comm_, stream_), group_.c_str());
      }
      if (recv_blocks.counts[q] > 0) {
        View r = recv.slice(recv_blocks.displs[q], recv_blocks.counts[q]);
        MB_CHECK_NCCL(ncclRecv(r.data, r.count, nccl_type(recv.dtype), p, comm_, stream_), group_.c_str());
      }
    }
    MB_CHECK_NCCL(ncclGroupEnd(), group_.c_str());
  }

  // Point-to-point on the communicator's stream; NCCL pairs a rank's sends to a peer with the
  // peer's receives in posting order (the tag is MPI's alone).
  std::unique_ptr<Request> isend(View send, int to, int) override {
    MB_CHECK_NCCL(ncclSend(send.data, send.count, nccl_type(send.dtype), to, comm_, stream_), group_.c_str());
    return std::make_unique<NcclRequest>(stream_, group_);
  }
  std::pair<std::unique_ptr<Request>, std::unique_ptr<Request>> isend_irecv(View send, int to, int, View recv,
                                                                          int from, int) override {
    MB_CHECK_NCCL(ncclGroupStart(), group_.c_str());
    MB_CHECK_NCCL(ncclSend(send.data, send.count, nccl_type(send.dtype), to, comm_, stream_), group_.c_str());
    MB_CHECK_NCCL(ncclRecv(recv.data, recv.count, nccl_type(recv.dtype), from, comm_, stream_), group_.c_str());
    MB_CHECK_NCCL(ncclGroupEnd(), group_.c_str());
    return {std::make_unique<NcclRequest>(stream_, group_), std::make_unique<NcclRequest>(stream_, group_)};
  }
  std::unique_ptr<Request> irecv(View recv, int from, int) override {
    MB_CHECK_NCCL(ncclRecv(recv.data, recv.count, nccl_type(recv.dtype), from, comm_, stream_), group_.c_str());
    return std::make_unique<NcclRequest>(stream_, group_);
  }
  // The compute stream's work so far must finish before NCCL reads what it produced.
  void order_after(void* producer) override {
    MB_CHECK_CUDA(cudaEventRecord(order_ev_, static_cast<cudaStream_t>(producer)), group_.c_str());
    MB_CHECK_CUDA(cudaStreamWaitEvent(stream_, order_ev_, 0), group_.c_str());
  }

  // The consumer's next work waits for everything queued here (an event, no host wait); a
  // host consumer (null) waits for the stream.
  void order_before(void* consumer) override {
    if (consumer == nullptr) {
      MB_CHECK_CUDA(cudaStreamSynchronize(stream_), group_.c_str());
      return;
    }
    MB_CHECK_CUDA(cudaEventRecord(done_ev_, stream_), group_.c_str());
    MB_CHECK_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(consumer), done_ev_, 0), group_.c_str());
  }

  void* stream() const override { return stream_; }

  std::unique_ptr<Captured> capture(const std::function<void()>& enqueue) override {
    return std::make_unique<NcclGraph>(stream_, enqueue, group_);
  }

  void barrier() override {
    synchronize();
    MB_CHECK_MPI(MPI_Barrier(mpi_), group_.c_str());
  }
  void synchronize() override {
    MB_CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy), group_.c_str());
    MB_CHECK_CUDA(cudaStreamSynchronize(stream_), group_.c_str());
    ncclResult_t async = ncclSuccess;
    MB_CHECK_NCCL(ncclCommGetAsyncError(comm_, &async), group_.c_str());
    MB_CHECK_NCCL(async, group_.c_str());
  }
  std::unique_ptr<Timer> make_timer(int marks) override {
    return std::make_unique<EventTimer>(marks, stream_, group_);
  }

 private:
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t order_ev_ = nullptr;
  cudaEvent_t done_ev_ = nullptr;  // order_before's: recorded here, waited on by the consumer
};

}  // namespace

bool built_with_nccl() { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm mpi, std::string group, int device) {
  return std::make_unique<NcclCommunicator>(mpi, std::move(group), device);
}

}  // namespace meshbench::comm
