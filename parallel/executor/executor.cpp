#include "executor/executor.hpp"

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace meshbench::parallel {

int64_t first_sample(const Plan& plan, int dp_rank, int micro) {
  return (int64_t{dp_rank} * plan.micro_batches + micro) * plan.model.micro_batch;
}

namespace {
template <typename S>
comm::DType dtype_of() {
  return sizeof(S) == 8 ? comm::DType::kDouble : comm::DType::kFloat;
}

// One step's point-to-point state on a pipeline rank: the posted activation sends (their
// buffer is the slot's output, kept until the micro-batch's backward), the gradient sends
// with the buffers they read, and the buffer a received output gradient lands in.
template <typename S>
class PipeStep {
 public:
  PipeStep(StepEnv<S>& env) : env_(env), pipe_(*env.pipe), n_(int64_t{env.model.tp_dims().rows} * env.model.config().hidden) {
    Gpt<S>& m = env.model;
    dout_ = BackendArray<S, S>(m.backend(), n_, &m.memory(), MemCat::kBuffers);
  }
  ~PipeStep() { drain(); }

  void recv_activation(const Action& a) {
    S* in = env_.model.stage_input(a.chunk, a.micro);
    recv(in, a.peer, pipe_.tag(a.micro, pipe_.virtual_stage(a.chunk) - 1, false));
  }
  void send_activation(const Action& a) {
    const S* out = env_.model.stage_output(a.chunk, a.micro);
    act_sends_[{a.chunk, a.micro}] = send(out, a.peer, pipe_.tag(a.micro, pipe_.virtual_stage(a.chunk), false));
  }
  void recv_gradient(const Action& a) {
    recv(dout_.data(), a.peer, pipe_.tag(a.micro, pipe_.virtual_stage(a.chunk), true));
  }
  // The backward of (chunk, micro): from the loss or the received gradient, into a fresh
  // send buffer unless this is virtual stage 0.
  void backward(const Action& a, S scale, bool last) {
    auto it = act_sends_.find({a.chunk, a.micro});  // its output was delivered: the peer sent this gradient
    if (it != act_sends_.end()) {
      it->second->wait();
      act_sends_.erase(it);
    }
    const int vs = pipe_.virtual_stage(a.chunk);
    const S* dout = vs == pipe_.last_virtual_stage() ? nullptr : dout_.data();
    din_ = vs == 0 ? nullptr : free_buffer();
    env_.model.backward_chunk(a.chunk, a.micro, scale, dout, din_, last);
  }
  void send_gradient(const Action& a) {
    if (din_ == nullptr) throw std::logic_error("pipeline schedule: a gradient send without its backward");
    for (auto& g : grad_sends_)
      if (g.buf.data() == din_) g.req = send(din_, a.peer, pipe_.tag(a.micro, pipe_.virtual_stage(a.chunk) - 1, true));
    din_ = nullptr;
  }
  void drain() {
    for (auto& [k, r] : act_sends_) r->wait();
    act_sends_.clear();
    for (auto& g : grad_sends_)
      if (g.req) g.req->wait();
  }

 private:
  struct GradSend {
    BackendArray<S, S> buf;
    std::unique_ptr<comm::Request> req;
  };
  comm::View view(const S* p) const {
    return comm::View{const_cast<S*>(p), static_cast<size_t>(n_), dtype_of<S>(), env_.model.backend().mem()};
  }
  void recv(S* p, int from, int tag) { pipe_.pp->irecv(view(p), from, tag)->wait(); }
  std::unique_ptr<comm::Request> send(const S* p, int to, int tag) {
    pipe_.pp->order_after(env_.model.backend().stream());
    return pipe_.pp->isend(view(p), to, tag);
  }
  // A gradient buffer whose send has completed, or a new one.
  S* free_buffer() {
    for (auto& g : grad_sends_)
      if (!g.req || g.req->test()) {
        g.req.reset();
        return g.buf.data();
      }
    Gpt<S>& m = env_.model;
    grad_sends_.push_back({BackendArray<S, S>(m.backend(), n_, &m.memory(), MemCat::kBuffers), nullptr});
    return grad_sends_.back().buf.data();
  }

  StepEnv<S>& env_;
  const PipeEnv& pipe_;
  int64_t n_;  // elements of one activation or gradient message: b x s x h
  BackendArray<S, S> dout_;
  std::vector<GradSend> grad_sends_;
  S* din_ = nullptr;
  std::map<std::pair<int, int>, std::unique_ptr<comm::Request>> act_sends_;
};

// The tied embedding's gradient summed over the first and last stage (the embedding group).
template <typename S>
void reduce_embedding(StepEnv<S>& env) {
  for (const auto& e : env.model.layout().entries())
    if (e.name == "wte") {
      comm::View v{env.model.grads_at(e.offset), static_cast<size_t>(e.numel), dtype_of<S>(), env.model.backend().mem()};
      env.pipe->embedding->order_after(env.model.backend().stream());
      env.pipe->embedding->all_reduce(v, v, comm::RedOp::kSum);
    }
}
}  // namespace

template <typename S>
double run_step(StepEnv<S>& env, const std::vector<Action>& actions, int step, int64_t data_step,
                int adam_t, bool zero_grads) {
  const GptConfig& c = env.model.config();
  const int m = env.plan.micro_batches;
  // The step's data is drawn before its clock starts (the data loader's work is not the step's).
  const size_t n = static_cast<size_t>(c.tokens());
  std::vector<int32_t> tok(n * static_cast<size_t>(m)), tgt(tok.size());
  for (const Action& a : actions)
    if (a.kind == ActionKind::kForward)
      synthetic_batch(tok.data() + a.micro * n, tgt.data() + a.micro * n, env.data, env.seed, data_step,
                      first_sample(env.plan, env.dp_rank, a.micro), c.micro_batch, c.seq, c.vocab);
  const S scale = static_cast<S>(env.sync ? env.sync->loss_scale() : 1.0 / m);
  Trace& tr = env.trace;
  tr.tags = TraceTags{step, 0, -1, 'F'};
  std::optional<PipeStep<S>> pipe;
  if (env.pipe) pipe.emplace(env);
  auto sample_slots = [&](double t) {
    if (tr.on && env.pipe)
      tr.slots.push_back({step, t, env.model.slots_held(),
                          env.model.memory().now[static_cast<int>(MemCat::kActivations)]});
  };
  // Ops the model records during one chunk's pass carry that chunk; the pass is a span.
  auto end_pass = [&](size_t from, const Action& a, char ph, double t0) {
    for (size_t k = from; k < tr.ops.size(); ++k) tr.ops[k].chunk = a.chunk;
    const double t1 = core::now_seconds();
    if (tr.on && env.pipe) tr.passes.push_back({step, a.micro, a.chunk, ph, t0, t1});
    sample_slots(t1);
  };
  double loss_sum = 0;
  // The phases partition the step: each action's span starts where the previous one ended.
  const double t_begin = core::now_seconds();
  double t_prev = t_begin;
  if (zero_grads) {  // counted with the forward
    env.model.zero_grad();
    const double t = core::now_seconds();
    tr.phase("forward", t_begin, t);
    t_prev = t;
  }
  sample_slots(t_prev);
  for (const Action& a : actions) {
    tr.tags.micro = a.micro;
    tr.tags.chunk = a.chunk;
    const double t0 = t_prev;
    const char* phase = "forward";
    switch (a.kind) {
      case ActionKind::kRecvActivation:
        tr.tags.phase = 'F';
        pipe->recv_activation(a);
        break;
      case ActionKind::kSendActivation: pipe->send_activation(a); break;
      case ActionKind::kForward: {
        tr.tags.phase = 'F';
        if (env.sync) env.sync->begin_forward(a.micro);
        env.model.set_trace(tr.on ? &tr.ops : nullptr, step, a.micro);
        const size_t first_op = tr.ops.size();
        const double tp0 = core::now_seconds();
        // The chunk's part of the micro-batch's loss (its MoE aux losses; the cross-entropy on
        // the last stage's last chunk): summed over the chunks here, over the stages below.
        loss_sum += static_cast<double>(env.model.forward_chunk(a.chunk, env.pipe ? a.micro : 0,
                                                                tok.data() + a.micro * n, tgt.data() + a.micro * n));
        end_pass(first_op, a, 'F', tp0);
        break;
      }
      case ActionKind::kRecvGradient:
        tr.tags.phase = 'B';
        phase = "backward";
        pipe->recv_gradient(a);
        break;
      case ActionKind::kSendGradient:
        phase = "backward";
        pipe->send_gradient(a);
        break;
      case ActionKind::kBackward: {
        tr.tags.phase = 'B';
        phase = "backward";
        if (env.sync) env.sync->begin_backward(a.micro, a.micro == m - 1);
        env.model.set_trace(tr.on ? &tr.ops : nullptr, step, a.micro);
        const size_t first_op = tr.ops.size();
        const double tp0 = core::now_seconds();
        if (pipe)  // the last micro-batch syncs SP's norm gradients
          pipe->backward(a, scale, a.micro == m - 1);
        else
          env.model.backward(scale, a.micro == m - 1);
        end_pass(first_op, a, 'B', tp0);
        break;
      }
      case ActionKind::kGradSync:
        tr.tags.phase = 'G';
        tr.tags.layer = -1;
        phase = "grad_sync";
        if (pipe) pipe->drain();
        {  // the tied embedding's copies summed before or after the data-parallel reduction
          const bool tied = env.pipe && env.pipe->embedding, first = env.sync && env.sync->sums_tied_embedding_first();
          if (tied && first) reduce_embedding(env);
          if (env.sync) env.sync->finish();
          if (tied && !first) reduce_embedding(env);
        }
        break;
      case ActionKind::kOptimizer:
        tr.tags.phase = 'O';
        phase = "optimizer";
        env.model.set_trace(tr.on ? &tr.ops : nullptr, step, 0);
        if (env.sync)
          env.sync->optimizer_step(env.adam, adam_t);
        else
          env.model.update(env.adam, adam_t);
        env.model.backend().synchronize();
        break;
    }
    t_prev = core::now_seconds();
    tr.phase(phase, t0, t_prev);
  }
  env.model.set_trace(nullptr, step, 0);
  if (tr.on) {
    tr.step_start.push_back(t_begin);
    tr.step_end.push_back(t_prev);
  }
  double loss = loss_sum / m;  // this rank's part of the mean over its micro-batches
  if (env.pipe && env.pipe->stages > 1) {  // the stages' parts summed, on every stage, off the clock
    MB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, env.pipe->pp->mpi_comm()), "pp");
  }
  return loss;
}

std::vector<AnalyticBytes> pipeline_analytic(const PipeEnv& pipe, int m, uint64_t message_bytes,
                                             uint64_t embedding_bytes) {
  uint64_t out = 0, in = 0;  // messages per micro-batch
  for (int c = 0; c < pipe.chunks; ++c) {
    const int vs = pipe.virtual_stage(c);
    const uint64_t below = vs > 0 ? 1 : 0, above = vs < pipe.last_virtual_stage() ? 1 : 0;
    out += above + below;  // the output activations up, the input gradient down
    in += below + above;   // the input activations, the output gradient
  }
  const uint64_t mm = static_cast<uint64_t>(m);
  std::vector<AnalyticBytes> a{{"pp", "send", out * mm * message_bytes, double(out * mm * message_bytes)},
                               {"pp", "recv", in * mm * message_bytes, 0.0}};
  if (pipe.embedding)  // two ranks: the all-reduce sends 2(n-1)/n S = S
    a.push_back({"embedding", "all_reduce", embedding_bytes, double(embedding_bytes)});
  return a;
}

template double run_step<float>(StepEnv<float>&, const std::vector<Action>&, int, int64_t, int, bool);

}  // namespace meshbench::parallel
