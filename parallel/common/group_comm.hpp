// A communication group as the model sees it: tensor parallel's, context parallel's, expert
// parallel's. The layers call these; kernels/comm_group.hpp implements them over a recording
// Communicator, ordered after the compute backend's queued work.
// Not here: the communicators (src/comm), what the strategies send (their folders).
#pragma once

#include <cstdint>
#include <vector>

namespace meshbench::parallel {

// A communication group as the model sees it (tensor parallel's, context parallel's).
// Calls are collective over the group and ordered after the backend's queued work; a
// blocking call's result is ready for the backend's next op. post_* return a handle for
// wait(); the buffers stay untouched until then. kernels/comm_group.hpp implements it over
// a recording Communicator.
template <typename S>
class GroupComm {
 public:
  virtual ~GroupComm() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void set_layer(int layer) = 0;  // the layer tag of the calls that follow (-1: none)
  virtual void all_reduce(S* x, int64_t n) = 0;          // sum, in place
  virtual void all_reduce_max(S* x, int64_t n) = 0;      // max, in place
  virtual void all_gather(S* full, const S* part, int64_t n_part) = 0;   // full = [part_0 | ...]
  virtual void reduce_scatter(S* part, const S* full, int64_t n_part) = 0;  // sum
  virtual void all_to_all(S* recv, const S* send, int64_t n_block) = 0;     // block j to rank j
  // Blocks of send_n[j] elements (packed in rank order) to rank j; recv_n[j] from rank j.
  virtual void all_to_allv(S* recv, const std::vector<int64_t>& recv_n, const S* send,
                           const std::vector<int64_t>& send_n) = 0;
  virtual int post_all_reduce(S* x, int64_t n) = 0;
  virtual int post_all_gather(S* full, const S* part, int64_t n_part) = 0;
  virtual int post_reduce_scatter(S* part, const S* full, int64_t n_part) = 0;
  // Sends n elements to rank `to` while receiving n from rank `from` (a ring step).
  virtual int post_exchange(const S* send, int to, S* recv, int from, int64_t n) = 0;
  virtual void wait(int handle) = 0;
};

}  // namespace meshbench::parallel
