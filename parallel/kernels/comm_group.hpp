// A communication group of the model (common/group_comm.hpp's GroupComm) over a recording
// Communicator, so every call lands in the trace under the group's dimension ("tp", "cp"):
// each call is ordered after the backend's queued work, and a blocking call is complete
// before the backend's next op. Tensor parallel's and context parallel's groups are these.
// Not here: what the strategies send (model/model.cpp, tensor_parallel/linear, context_parallel/attention, expert_parallel/moe), their bytes.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/backend.hpp"
#include "common/group_comm.hpp"
#include "common/trace.hpp"

namespace meshbench::parallel {

template <typename S>
class CommGroup final : public GroupComm<S> {
 public:
  // `comm`: the group (a RecordingComm); `be`: the compute every call is ordered after; `tags`
  // (may be null): the trace tags whose layer set_layer writes.
  CommGroup(comm::Communicator& comm, Backend<S>& be, TraceTags* tags);
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  void set_layer(int layer) override {
    if (tags_) tags_->layer = layer;
  }
  void all_reduce(S* x, int64_t n) override;
  void all_reduce_max(S* x, int64_t n) override;
  void all_gather(S* full, const S* part, int64_t n_part) override;
  void reduce_scatter(S* part, const S* full, int64_t n_part) override;
  void all_to_all(S* recv, const S* send, int64_t n_block) override;
  void all_to_allv(S* recv, const std::vector<int64_t>& recv_n, const S* send,
                   const std::vector<int64_t>& send_n) override;
  int post_all_reduce(S* x, int64_t n) override;
  int post_all_gather(S* full, const S* part, int64_t n_part) override;
  int post_reduce_scatter(S* part, const S* full, int64_t n_part) override;
  int post_exchange(const S* send, int to, S* recv, int from, int64_t n) override;
  void wait(int handle) override;

 private:
  comm::View view(const S* p, int64_t n) const;
  int keep(std::unique_ptr<comm::Request> r);
  void done();  // a blocking call: its result must be there before the backend's next op
  comm::Communicator& comm_;
  Backend<S>& be_;
  TraceTags* tags_;
  std::vector<std::unique_ptr<comm::Request>> pending_;
};

}  // namespace meshbench::parallel
