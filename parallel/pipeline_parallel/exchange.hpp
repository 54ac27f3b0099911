// Pipeline parallel's point-to-point exchange: a rank's place in the pipeline (PipeEnv), one
// step's sends and receives of activations and gradients between virtual stages
// (PipeExchange, which the executor calls per schedule action), the tied embedding's gradient
// summed over its two copies, and the bytes all of this must move per step.
// Not here: the schedules (schedule.hpp), the order of actions (executor.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "model/model.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "common/grad_sync.hpp"
#include "common/plan.hpp"

namespace meshbench::parallel {

// The pipeline of a rank (pipeline parallel): its communicators (recording, dims "pp" and
// "embedding") and its place. embedding is null where the rank is in no embedding group or
// the head is untied.
struct PipeEnv {
  comm::Communicator* pp = nullptr;
  comm::Communicator* embedding = nullptr;
  int stages = 1, rank = 0, chunks = 1;
  int virtual_stage(int chunk) const { return chunk * stages + rank; }
  int last_virtual_stage() const { return stages * chunks - 1; }
  // The tag of the message across the boundary after virtual stage `lower` for micro-batch
  // `micro`, activations (grad false) or gradients (true): unique within a step.
  int tag(int micro, int lower, bool grad) const { return (micro * stages * chunks + lower) * 2 + (grad ? 1 : 0); }
};

// One step's point-to-point state on a pipeline rank: the posted activation sends (their
// buffer is the slot's output, kept until the micro-batch's backward), the gradient sends
// with the buffers they read, and the buffer a received output gradient lands in. Sends are
// posted non-blocking and complete behind the compute; a receive completes before the
// compute that needs it. Every send is complete when the object is destroyed.
template <typename S>
class PipeExchange {
 public:
  PipeExchange(Gpt<S>& model, const PipeEnv& pipe);
  ~PipeExchange() { drain(); }
  PipeExchange(const PipeExchange&) = delete;
  PipeExchange& operator=(const PipeExchange&) = delete;

  void recv_activation(const Action& a);
  void send_activation(const Action& a);
  void recv_gradient(const Action& a);
  // The backward of (chunk, micro): from the loss or the received gradient, into a fresh send
  // buffer unless this is virtual stage 0. sync: sum the replicated parameters' gradients over
  // tensor parallel (sequence parallel's norms) after it.
  void backward(const Action& a, S scale, bool sync);
  void send_gradient(const Action& a);
  // A send immediately followed in the schedule by a receive (the only runs of
  // point-to-point actions the schedules have): posted as one exchange (NCCL: one group),
  // then the receive waited for. Single ungrouped NCCL calls of two stages facing each other
  // (1F1B: stage 0 sends a1 then receives g0, stage 1 sends g0 then receives a1) deadlock
  // once the message exceeds NCCL's buffers.
  void send_then_recv(const Action& send, const Action& recv);
  void drain();  // waits for every posted send

 private:
  struct GradSend {
    BackendArray<S, S> buf;
    std::unique_ptr<comm::Request> req;
  };
  // One message: its buffer and tag (PipeEnv::tag).
  struct Msg {
    S* p;
    int tag;
  };
  Msg outgoing(const Action& a);  // a send's buffer (a gradient send: the last backward's)
  Msg incoming(const Action& a);  // a receive's buffer
  void keep(const Action& a, std::unique_ptr<comm::Request> req);  // a posted send, until done
  comm::View view(const S* p) const;
  void recv(S* p, int from, int tag);
  std::unique_ptr<comm::Request> send(const S* p, int to, int tag);
  S* free_buffer();  // a gradient buffer whose send has completed, or a new one

  Gpt<S>& model_;
  const PipeEnv& pipe_;
  int64_t n_;  // elements of one activation or gradient message: b x s x h
  BackendArray<S, S> dout_;
  std::vector<GradSend> grad_sends_;
  S* din_ = nullptr;
  std::map<std::pair<int, int>, std::unique_ptr<comm::Request>> act_sends_;
};

// An in-place sum of v over c, ordered on both sides with the compute stream `compute` (null:
// host compute): after what the stream queued so far (order_after), and before what it
// queues next (order_before), so that nothing reads or overwrites v before the sum is done.
void all_reduce_in_order(comm::Communicator& c, comm::View v, void* compute);

// The tied embedding's gradient summed over the first and last stage (the embedding group),
// with every consumer ordered after it: the optimizer, the check's gradient download, the
// next step's zero_grad (all on the compute stream) and ZeRO's reduce-scatter (ordered after
// the compute stream) (issue 44, item 5: it was queued and never waited for).
template <typename S>
void reduce_tied_embedding(Gpt<S>& model, const PipeEnv& pipe);

// The point-to-point payload per step of pipeline rank pipe.rank (dim "pp", kinds send and
// recv), from the plan: per boundary between virtual stages and per micro-batch one
// activation and one gradient of `message_bytes` (b x s/cp x h values); a virtual stage sends
// its output activations unless it is the last and its input gradient unless it is the
// first, and receives the same. Over a pipeline: 2 m (P V - 1) messages each way. With a
// tied head, the embedding group's all-reduce of wte (`embedding_bytes`: this rank's rows of
// the vocabulary, dim "embedding").
std::vector<AnalyticBytes> pipeline_analytic(const PipeEnv& pipe, int micro_batches, uint64_t message_bytes,
                                             uint64_t embedding_bytes);
// The same with the message sizes from the plan (fp32 values).
std::vector<AnalyticBytes> pipeline_analytic(const PipeEnv& pipe, const Plan& plan);

}  // namespace meshbench::parallel
