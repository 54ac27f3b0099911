#include "comm/watched_comm.hpp"

namespace meshbench::comm {
namespace {

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

  // Bytes: nccl-tests' size S of the call (results/README.md).
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
  return std::make_unique<WatchedCommunicator>(std::move(inner), watch);
}

}  // namespace meshbench::comm
