// MPI backend: host buffers; device buffers are staged through host memory (and labelled
// "device-staged" by the driver). Errors return (MPI_ERRORS_RETURN) and abort with exit 3
// naming the rank, host, call and group. Broadcast is in-place only: MPI_Bcast has one
// buffer, and emulating out-of-place with a copy would time a memcpy.
#include <mpi.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"

namespace meshbench::comm {
namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kFloat: return MPI_FLOAT;
    case DType::kDouble: return MPI_DOUBLE;
    case DType::kInt32: return MPI_INT32_T;
    case DType::kInt8: return MPI_INT8_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(RedOp op) {
  switch (op) {
    case RedOp::kSum: return MPI_SUM;
    case RedOp::kProd: return MPI_PROD;
    case RedOp::kMin: return MPI_MIN;
    case RedOp::kMax: return MPI_MAX;
    default: return MPI_OP_NULL;
  }
}

int as_int(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT32_MAX))
    throw core::UsageError(std::string(what) + ": more than 2^31-1 elements in one MPI call");
  return static_cast<int>(n);
}

class HostTimer final : public Timer {
 public:
  explicit HostTimer(int marks) : t_(static_cast<size_t>(marks), 0.0) {}
  void mark(int i) override { t_[static_cast<size_t>(i)] = core::now_seconds(); }
  void sync() override {}
  double elapsed(int i, int j) const override {
    return t_[static_cast<size_t>(j)] - t_[static_cast<size_t>(i)];
  }

 private:
  std::vector<double> t_;
};

// Host copies of device views for the duration of one call.
class Staged {
 public:
  Staged(View v, std::vector<std::byte>& store, bool copy_in) : dev_(v), view_(v) {
    if (v.mem != compute::MemKind::kDevice) return;
    store.resize(v.bytes());
    if (copy_in && v.bytes()) compute::copy_to_host(store.data(), v.data, v.bytes());
    view_.data = store.data();
    view_.mem = compute::MemKind::kHost;
  }
  void copy_out() const {
    if (dev_.mem == compute::MemKind::kDevice && dev_.bytes())
      compute::copy_to_device(dev_.data, view_.data, dev_.bytes());
  }
  const View& host() const { return view_; }

 private:
  View dev_, view_;
};

// A non-blocking MPI call with its host staging (device views): results are copied back to
// the device once MPI reports completion.
class MpiRequest final : public Request {
 public:
  MpiRequest(std::string group) : group_(std::move(group)) {}
  ~MpiRequest() override {
    if (!done_) wait();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    MB_CHECK_MPI(MPI_Testall(2, reqs_, &flag, MPI_STATUSES_IGNORE), group_.c_str());
    if (flag) finish();
    return done_;
  }
  void wait() override {
    if (done_) return;
    MB_CHECK_MPI(MPI_Waitall(2, reqs_, MPI_STATUSES_IGNORE), group_.c_str());
    finish();
  }
  MPI_Request reqs_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // a collective uses the first
  MPI_Request& req_ = reqs_[0];
  std::vector<std::byte> send_store_, recv_store_;
  std::optional<Staged> out_;

 private:
  void finish() {
    done_ = true;
    if (out_) out_->copy_out();
  }
  std::string group_;
  bool done_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm mpi, std::string group) : Communicator(mpi, std::move(group)) {
    MB_CHECK_MPI(MPI_Comm_set_errhandler(mpi_, MPI_ERRORS_RETURN), group_.c_str());
    MB_CHECK_MPI(MPI_Comm_rank(mpi_, &rank_), group_.c_str());
    MB_CHECK_MPI(MPI_Comm_size(mpi_, &size_), group_.c_str());
  }

  Backend backend() const override { return Backend::kMpi; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::optional<std::string> unsupported(Collective c, DType t, std::optional<RedOp> op,
                                         bool inplace, compute::MemKind) const override {
    if (mpi_type(t) == MPI_DATATYPE_NULL)
      return "backend mpi does not support dtype " + std::string(name(t)) +
             " (MPI has no standard " + std::string(name(t)) + " type; use --backend nccl)";
    if (op && mpi_op(*op) == MPI_OP_NULL)
      return "backend mpi does not support op " + std::string(name(*op)) +
             " (MPI has no average reduction; use --op sum or --backend nccl)";
    if (c == Collective::kAllToAllV && inplace) return "backend mpi: all_to_allv is out of place only";
    if (c == Collective::kBroadcast && !inplace)
      return "backend mpi has no out-of-place broadcast (MPI_Bcast has one buffer)";
    return std::nullopt;
  }

  std::size_t reduce_scatter_inplace_offset(std::size_t) const override { return 0; }

  void all_reduce(View send, View recv, RedOp op) override {
    bool inplace = send.data == recv.data;
    Staged r(recv, recv_store_, inplace);
    Staged s(send, send_store_, !inplace);
    MB_CHECK_MPI(MPI_Allreduce(inplace ? MPI_IN_PLACE : s.host().data, r.host().data,
                               as_int(recv.count, "all_reduce"), mpi_type(recv.dtype), mpi_op(op), mpi_),
                 group_.c_str());
    r.copy_out();
  }

  void all_gather(View send, View recv) override {
    bool inplace = send.data == recv.slice(static_cast<size_t>(rank_) * send.count, send.count).data;
    Staged r(recv, recv_store_, inplace);
    Staged s(send, send_store_, !inplace);
    MB_CHECK_MPI(MPI_Allgather(inplace ? MPI_IN_PLACE : s.host().data, as_int(send.count, "all_gather"),
                               mpi_type(send.dtype), r.host().data, as_int(send.count, "all_gather"),
                               mpi_type(recv.dtype), mpi_),
                 group_.c_str());
    r.copy_out();
  }

  void reduce_scatter(View send, View recv, RedOp op) override {
    bool inplace = send.data == recv.data;  // offset 0 for MPI_IN_PLACE
    if (inplace) {
      Staged s(send, send_store_, true);
      MB_CHECK_MPI(MPI_Reduce_scatter_block(MPI_IN_PLACE, s.host().data, as_int(recv.count, "reduce_scatter"),
                                            mpi_type(send.dtype), mpi_op(op), mpi_),
                   group_.c_str());
      s.copy_out();
      return;
    }
    Staged s(send, send_store_, true);
    Staged r(recv, recv_store_, false);
    MB_CHECK_MPI(MPI_Reduce_scatter_block(s.host().data, r.host().data, as_int(recv.count, "reduce_scatter"),
                                          mpi_type(send.dtype), mpi_op(op), mpi_),
                 group_.c_str());
    r.copy_out();
  }

  void all_to_all(View send, View recv) override {
    bool inplace = send.data == recv.data;
    int block = as_int(recv.count / static_cast<size_t>(size_), "all_to_all");
    Staged r(recv, recv_store_, inplace);
    Staged s(send, send_store_, !inplace);
    MB_CHECK_MPI(MPI_Alltoall(inplace ? MPI_IN_PLACE : s.host().data, block, mpi_type(send.dtype),
                              r.host().data, block, mpi_type(recv.dtype), mpi_),
                 group_.c_str());
    r.copy_out();
  }

  void broadcast(View, View recv, int root) override {
    Staged r(recv, recv_store_, rank_ == root);
    MB_CHECK_MPI(MPI_Bcast(r.host().data, as_int(recv.count, "broadcast"), mpi_type(recv.dtype), root, mpi_),
                 group_.c_str());
    r.copy_out();
  }

  void sendrecv(View send, int to, View recv, int from) override {
    constexpr int kTag = 4242;
    if (send.data == recv.data) {
      Staged r(recv, recv_store_, true);
      MB_CHECK_MPI(MPI_Sendrecv_replace(r.host().data, as_int(recv.count, "sendrecv"), mpi_type(recv.dtype),
                                        to, kTag, from, kTag, mpi_, MPI_STATUS_IGNORE),
                   group_.c_str());
      r.copy_out();
      return;
    }
    Staged s(send, send_store_, true);
    Staged r(recv, recv_store_, false);
    MB_CHECK_MPI(MPI_Sendrecv(s.host().data, as_int(send.count, "sendrecv"), mpi_type(send.dtype), to, kTag,
                              r.host().data, as_int(recv.count, "sendrecv"), mpi_type(recv.dtype), from,
                              kTag, mpi_, MPI_STATUS_IGNORE),
                 group_.c_str());
    r.copy_out();
  }

  std::unique_ptr<Request> iall_reduce(View send, View recv, RedOp op) override {
    auto q = std::make_unique<MpiRequest>(group_);
    const bool inplace = send.data == recv.data;
    q->out_.emplace(recv, q->recv_store_, inplace);
    Staged s(send, q->send_store_, !inplace);
    MB_CHECK_MPI(MPI_Iallreduce(inplace ? MPI_IN_PLACE : s.host().data, q->out_->host().data,
                                as_int(recv.count, "iall_reduce"), mpi_type(recv.dtype), mpi_op(op),
                                mpi_, &q->req_),
                 group_.c_str());
    return q;
  }

  std::unique_ptr<Request> isendrecv(View send, int to, View recv, int from, int tag) override {
    auto q = std::make_unique<MpiRequest>(group_);
    Staged s(send, q->send_store_, true);
    q->out_.emplace(recv, q->recv_store_, false);
    MB_CHECK_MPI(MPI_Irecv(q->out_->host().data, as_int(recv.count, "isendrecv"), mpi_type(recv.dtype), from, tag, mpi_,
                           &q->reqs_[1]),
                 group_.c_str());
    MB_CHECK_MPI(MPI_Isend(s.host().data, as_int(send.count, "isendrecv"), mpi_type(send.dtype), to, tag, mpi_,
                           &q->reqs_[0]),
                 group_.c_str());
    return q;
  }
  std::unique_ptr<Request> iall_gather(View send, View recv) override {
    auto q = std::make_unique<MpiRequest>(group_);
    const bool inplace =
        send.data == recv.slice(static_cast<size_t>(rank_) * send.count, send.count).data;
    q->out_.emplace(recv, q->recv_store_, inplace);
    Staged s(send, q->send_store_, !inplace);
    MB_CHECK_MPI(MPI_Iallgather(inplace ? MPI_IN_PLACE : s.host().data, as_int(send.count, "iall_gather"),
                                mpi_type(send.dtype), q->out_->host().data,
                                as_int(send.count, "iall_gather"), mpi_type(recv.dtype), mpi_, &q->req_),
                 group_.c_str());
    return q;
  }

  std::unique_ptr<Request> ireduce_scatter(View send, View recv, RedOp op) override {
    auto q = std::make_unique<MpiRequest>(group_);
    const bool inplace = send.data == recv.data;
    if (inplace) {
      q->out_.emplace(send, q->send_store_, true);
      MB_CHECK_MPI(MPI_Ireduce_scatter_block(MPI_IN_PLACE, q->out_->host().data,
                                             as_int(recv.count, "ireduce_scatter"), mpi_type(send.dtype),
                                             mpi_op(op), mpi_, &q->req_),
                   group_.c_str());
      return q;
    }
    Staged s(send, q->send_store_, true);
    q->out_.emplace(recv, q->recv_store_, false);
    MB_CHECK_MPI(MPI_Ireduce_scatter_block(s.host().data, q->out_->host().data,
                                           as_int(recv.count, "ireduce_scatter"), mpi_type(send.dtype),
                                           mpi_op(op), mpi_, &q->req_),
                 group_.c_str());
    return q;
  }

  // Point-to-point: MPI_Isend / MPI_Irecv with the caller's tag (device views staged).
  std::unique_ptr<Request> isend(View send, int to, int tag) override {
    auto q = std::make_unique<MpiRequest>(group_);
    Staged s(send, q->send_store_, true);
    MB_CHECK_MPI(MPI_Isend(s.host().data, as_int(send.count, "isend"), mpi_type(send.dtype), to, tag, mpi_, &q->req_),
                 group_.c_str());
    return q;
  }
  std::unique_ptr<Request> irecv(View recv, int from, int tag) override {
    auto q = std::make_unique<MpiRequest>(group_);
    q->out_.emplace(recv, q->recv_store_, false);
    MB_CHECK_MPI(MPI_Irecv(q->out_->host().data, as_int(recv.count, "irecv"), mpi_type(recv.dtype), from, tag, mpi_,
                           &q->req_),
                 group_.c_str());
    return q;
  }

  void all_to_allv(View send, const PeerBlocks& send_blocks, View recv, const PeerBlocks& recv_blocks) override {
    check_blocks(send_blocks, send, size_, "send");
    check_blocks(recv_blocks, recv, size_, "recv");
    auto ints = [](const std::vector<std::size_t>& v) {
      std::vector<int> out(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) out[i] = as_int(v[i], "all_to_allv");
      return out;
    };
    const std::vector<int> sc = ints(send_blocks.counts), sd = ints(send_blocks.displs),
                           rc = ints(recv_blocks.counts), rd = ints(recv_blocks.displs);
    Staged s(send, send_store_, true);
    Staged r(recv, recv_store_, false);
    MB_CHECK_MPI(MPI_Alltoallv(s.host().data, sc.data(), sd.data(), mpi_type(send.dtype), r.host().data, rc.data(),
                               rd.data(), mpi_type(recv.dtype), mpi_),
                 group_.c_str());
    r.copy_out();
  }

  // Host compute (producer null) is done when its call returns; a device producer's queued
  // work must finish before the staging copy reads it.
  void order_after(void* producer) override {
    if (producer != nullptr) compute::stream_synchronize(producer);
  }

  // A blocking call's staged result is copied back (and complete) before it returns.
  void order_before(void*) override {}
  std::unique_ptr<Captured> capture(const std::function<void()>&) override { return nullptr; }

  void barrier() override { MB_CHECK_MPI(MPI_Barrier(mpi_), group_.c_str()); }
  void synchronize() override {}
  std::unique_ptr<Timer> make_timer(int marks) override { return std::make_unique<HostTimer>(marks); }

 private:
  int rank_ = 0, size_ = 1;
  std::vector<std::byte> send_store_, recv_store_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm mpi, std::string group) {
  return std::make_unique<MpiCommunicator>(mpi, std::move(group));
}

}  // namespace meshbench::comm
