#include "comm/watched_comm.hpp"

#include "comm/peer_board.hpp"

namespace meshbench::comm {
namespace {

// A non-blocking call: posting is watched by the communicator; waiting for it here, under the
// call's name (a test() returns at once and needs no watch).
class WatchedRequest final : public Request {
 public:
  // `op` a literal and `group` the communicator's name: the watch keeps the pointers.
  WatchedRequest(std::unique_ptr<Request> inner, core::OpWatch& w, const char* op, std::uint64_t bytes,
                 const char* group)
      : in_(std::move(inner)), w_(w), op_(op), bytes_(bytes), group_(group) {}
  bool test() override { return in_->test(); }
  void wait() override {
    WatchScope s(&w_, op_, bytes_, group_);
    in_->wait();
  }
  void wait_on(void* consumer) override {  // a device consumer's wait returns at once
    WatchScope s(&w_, op_, bytes_, group_);
    in_->wait_on(consumer);
  }

 private:
  std::unique_ptr<Request> in_;
  core::OpWatch& w_;
  const char* op_;
  std::uint64_t bytes_;
  const char* group_;
};

class WatchedCommunicator final : public Communicator {
 public:
  WatchedCommunicator(std::unique_ptr<Communicator> inner, core::OpWatch& watch)
      : Communicator(inner->mpi_comm(), inner->group_name()), in_(std::move(inner)), w_(watch) {}

  Backend backend() const override { return in_->backend(); }
  int rank() const override { return in_->rank(); }
  int size() const override { return in_->size(); }
  std::optional<std::string> unsupported(Collective c, DType t, std::optional<RedOp> op, bool inplace,
                                         compute::MemKind mem) const override {
    return in_->unsupported(c, t, op, inplace, mem);
  }
  std::size_t reduce_scatter_inplace_offset(std::size_t n) const override {
    return in_->reduce_scatter_inplace_offset(n);
  }

  // Bytes: nccl-tests' size S of the call (docs/results.md).
  void all_reduce(View send, View recv, RedOp op) override {
    WatchScope s(&w_, "all_reduce", recv.bytes(), group_.c_str());
    in_->all_reduce(send, recv, op);
  }
  void all_gather(View send, View recv) override {
    WatchScope s(&w_, "all_gather", recv.bytes(), group_.c_str());
    in_->all_gather(send, recv);
  }
  void reduce_scatter(View send, View recv, RedOp op) override {
    WatchScope s(&w_, "reduce_scatter", send.bytes(), group_.c_str());
    in_->reduce_scatter(send, recv, op);
  }
  void all_to_all(View send, View recv) override {
    WatchScope s(&w_, "all_to_all", send.bytes(), group_.c_str());
    in_->all_to_all(send, recv);
  }
  void broadcast(View send, View recv, int root) override {
    WatchScope s(&w_, "broadcast", recv.bytes(), group_.c_str());
    in_->broadcast(send, recv, root);
  }
  void sendrecv(View send, int to, View recv, int from) override {
    WatchScope s(&w_, "sendrecv", send.bytes(), group_.c_str());
    in_->sendrecv(send, to, recv, from);
  }
  std::unique_ptr<Request> iall_reduce(View send, View recv, RedOp op) override {
    WatchScope s(&w_, "iall_reduce", recv.bytes(), group_.c_str());
    return std::make_unique<WatchedRequest>(in_->iall_reduce(send, recv, op), w_, "all_reduce wait", recv.bytes(), group_.c_str());
  }
  std::unique_ptr<Request> isendrecv(View send, int to, View recv, int from, int tag) override {
    WatchScope s(&w_, "isendrecv", send.bytes(), group_.c_str());
    return std::make_unique<WatchedRequest>(in_->isendrecv(send, to, recv, from, tag), w_, "sendrecv wait", send.bytes(),
                                            group_.c_str());
  }
  std::unique_ptr<Request> iall_gather(View send, View recv) override {
    WatchScope s(&w_, "iall_gather", recv.bytes(), group_.c_str());
    return std::make_unique<WatchedRequest>(in_->iall_gather(send, recv), w_, "all_gather wait", recv.bytes(), group_.c_str());
  }
  std::unique_ptr<Request> ireduce_scatter(View send, View recv, RedOp op) override {
    WatchScope s(&w_, "ireduce_scatter", send.bytes(), group_.c_str());
    return std::make_unique<WatchedRequest>(in_->ireduce_scatter(send, recv, op), w_, "reduce_scatter wait",
                                            send.bytes(), group_.c_str());
  }
  std::unique_ptr<Request> isend(View send, int to, int tag) override {
    WatchScope s(&w_, "isend", send.bytes(), group_.c_str());
    return std::make_unique<WatchedRequest>(in_->isend(send, to, tag), w_, "send wait", send.bytes(), group_.c_str());
  }
  std::unique_ptr<Request> irecv(View recv, int from, int tag) override {
    WatchScope s(&w_, "irecv", recv.bytes(), group_.c_str());
    return std::make_unique<WatchedRequest>(in_->irecv(recv, from, tag), w_, "recv wait", recv.bytes(), group_.c_str());
  }
  std::pair<std::unique_ptr<Request>, std::unique_ptr<Request>> isend_irecv(View send, int to, int send_tag, View recv,
                                                                          int from, int recv_tag) override {
    WatchScope s(&w_, "isend_irecv", send.bytes(), group_.c_str());
    auto [sq, rq] = in_->isend_irecv(send, to, send_tag, recv, from, recv_tag);
    return {std::make_unique<WatchedRequest>(std::move(sq), w_, "send wait", send.bytes(), group_.c_str()),
            std::make_unique<WatchedRequest>(std::move(rq), w_, "recv wait", recv.bytes(), group_.c_str())};
  }
  void order_after(void* producer) override { in_->order_after(producer); }
  void order_before(void* consumer) override { in_->order_before(consumer); }
  void* stream() const override { return in_->stream(); }
  std::unique_ptr<Captured> capture(const std::function<void()>& enqueue) override { return in_->capture(enqueue); }
  void all_to_allv(View send, const PeerBlocks& sb, View recv, const PeerBlocks& rb) override {
    WatchScope s(&w_, "all_to_allv", sb.total() * size_of(send.dtype), group_.c_str());
    in_->all_to_allv(send, sb, recv, rb);
  }
  void barrier() override {
    WatchScope s(&w_, "barrier", 0, group_.c_str());
    in_->barrier();
  }
  void synchronize() override {
    WatchScope s(&w_, "synchronize", 0, group_.c_str());
    in_->synchronize();
  }
  std::unique_ptr<Timer> make_timer(int marks) override { return in_->make_timer(marks); }

 private:
  std::unique_ptr<Communicator> in_;
  core::OpWatch& w_;
};

}  // namespace

std::unique_ptr<Communicator> make_watched(std::unique_ptr<Communicator> inner, core::OpWatch& watch) {
  register_group(inner->group_name(), inner->mpi_comm());  // a hang in it can name its absent ranks
  return std::make_unique<WatchedCommunicator>(std::move(inner), watch);
}

}  // namespace meshbench::comm
