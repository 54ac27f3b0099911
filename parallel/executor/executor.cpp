#include "executor/executor.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include "comm/watched_comm.hpp"
#include "core/error.hpp"
#include "core/op_watch.hpp"
#include "core/timer.hpp"
#include "pipeline_parallel/walk.hpp"

namespace meshbench::parallel {

int64_t first_sample(const Plan& plan, int dp_rank, int micro) {
  return (int64_t{dp_rank} * plan.micro_batches + micro) * plan.model.micro_batch;
}

namespace {

// The step's data, drawn before its clock starts (the data loader's work is not the step's):
// every micro-batch this rank's actions forward, back to back.
template <typename S>
void draw_batch(const StepEnv<S>& env, const std::vector<Action>& actions, int64_t data_step,
                std::vector<int32_t>& tok, std::vector<int32_t>& tgt) {
  const GptConfig& c = env.model.config();
  const size_t n = static_cast<size_t>(c.tokens());
  tok.assign(n * static_cast<size_t>(env.plan.micro_batches), 0);
  tgt.assign(tok.size(), 0);
  for (const Action& a : actions)
    if (a.kind == ActionKind::kForward)
      synthetic_batch(tok.data() + a.micro * n, tgt.data() + a.micro * n, env.data, env.seed, data_step,
                      first_sample(env.plan, env.dp_rank, a.micro), c.micro_batch, c.seq, c.vocab);
}

// What the hang watchdog names when an action stops progressing (core::set_phase).
const char* action_word(ActionKind k) {
  switch (k) {
    case ActionKind::kRecvActivation: return "pipeline receive (activation)";
    case ActionKind::kSendActivation: return "pipeline send (activation)";
    case ActionKind::kForward: return "forward";
    case ActionKind::kRecvGradient: return "pipeline receive (gradient)";
    case ActionKind::kSendGradient: return "pipeline send (gradient)";
    case ActionKind::kBackward: return "backward";
    case ActionKind::kGradSync: return "gradient sync";
    case ActionKind::kOptimizer: return "optimizer";
  }
  return "step";
}

// One step's run of an action list: each action does its part and names its phase.
template <typename S>
class StepRun {
 public:
  // `boundary`: called with each completed action's phase (the time split's partition).
  StepRun(StepEnv<S>& env, int step, int64_t data_step, int adam_t, const std::vector<Action>& actions,
          std::function<void(const char*)> boundary)
      : env_(env), tr_(env.trace), boundary_(std::move(boundary)), step_(step), adam_t_(adam_t), m_(env.plan.micro_batches),
        n_(static_cast<size_t>(env.model.config().tokens())),
        scale_(static_cast<S>(env.sync ? env.sync->loss_scale() : 1.0 / m_)) {
    draw_batch(env, actions, data_step, tok_, tgt_);
    if (env.pipe) pipe_.emplace(env.model, *env.pipe);
  }

  // The walk's handler (pipeline_parallel/walk.hpp): each action does its part; the walk
  // names its phase. Every action completes (a receive waits for its data).
  void begin(const Action& a) {
    tr_.tags.micro = a.micro;
    tr_.tags.chunk = a.chunk;
    core::set_phase(action_word(a.kind), a.micro);
  }
  bool forward(const Action& a) { return run_forward(a), true; }
  bool backward(const Action& a) { return run_backward(a), true; }
  bool send(const Action& a) {
    if (a.kind == ActionKind::kSendActivation)
      pipe_->send_activation(a);
    else
      pipe_->send_gradient(a);
    return true;
  }
  bool recv(const Action& a) {
    tr_.tags.phase = a.kind == ActionKind::kRecvActivation ? 'F' : 'B';
    if (a.kind == ActionKind::kRecvActivation)
      pipe_->recv_activation(a);
    else
      pipe_->recv_gradient(a);
    return true;
  }
  bool exchange(const Action& s, const Action& r) {
    tr_.tags.micro = r.micro;
    tr_.tags.chunk = r.chunk;
    tr_.tags.phase = r.kind == ActionKind::kRecvActivation ? 'F' : 'B';
    pipe_->send_then_recv(s, r);
    return true;
  }
  bool grad_sync(const Action&) { return run_grad_sync(), true; }
  bool optimizer(const Action&) { return run_optimizer(), true; }
  void end(const Action&, const char* phase) { boundary_(phase); }

  // The pipeline's activations held, sampled after each pass.
  void sample_slots(double t) {
    if (tr_.on && env_.pipe)
      tr_.slots.push_back({step_, t, env_.model.slots_held(),
                           env_.model.memory().now[static_cast<int>(MemCat::kActivations)], mark()});
  }
  // A device step's mark on the compute stream (-1 on the host or with the trace off).
  int mark() const { return tr_.mark(env_.model.backend().stream()); }
  double loss_sum() const { return loss_sum_; }

 private:
  void run_forward(const Action& a) {
    tr_.tags.phase = 'F';
    if (env_.sync) env_.sync->begin_forward(a.micro);
    env_.model.set_trace(tr_.on ? &tr_.ops : nullptr, step_, a.micro);
    const size_t first_op = tr_.ops.size();
    const double t0 = core::now_seconds();
    const int m0 = mark();
    // The chunk's part of the micro-batch's loss (its MoE aux losses; the cross-entropy on
    // the last stage's last chunk): summed over the chunks here, over the stages in run_step.
    loss_sum_ += static_cast<double>(env_.model.forward_chunk(a.chunk, env_.pipe ? a.micro : 0,
                                                              tok_.data() + a.micro * n_, tgt_.data() + a.micro * n_));
    end_pass(first_op, a, 'F', t0, m0);
  }

  void run_backward(const Action& a) {
    tr_.tags.phase = 'B';
    if (env_.sync) env_.sync->begin_backward(a.micro, a.micro == m_ - 1);
    env_.model.set_trace(tr_.on ? &tr_.ops : nullptr, step_, a.micro);
    const size_t first_op = tr_.ops.size();
    const double t0 = core::now_seconds();
    const int m0 = mark();
    // the last micro-batch syncs SP's norm gradients (ZeRO-3: every micro-batch)
    const bool sync = a.micro == m_ - 1 || (env_.sync && env_.sync->reduces_every_micro_batch());
    if (pipe_)
      pipe_->backward(a, scale_, sync);
    else
      env_.model.backward(scale_, sync);
    end_pass(first_op, a, 'B', t0, m0);
  }

  void run_grad_sync() {
    tr_.tags.phase = 'G';
    tr_.tags.layer = -1;
    if (pipe_) pipe_->drain();
    // The tied embedding's copies summed before or after the data-parallel reduction.
    const bool tied = env_.pipe && env_.pipe->embedding, first = env_.sync && env_.sync->sums_tied_embedding_first();
    if (tied && first) reduce_tied_embedding(env_.model, *env_.pipe);
    if (env_.sync) env_.sync->finish();
    if (tied && !first) reduce_tied_embedding(env_.model, *env_.pipe);
  }

  void run_optimizer() {
    tr_.tags.phase = 'O';
    env_.model.set_trace(tr_.on ? &tr_.ops : nullptr, step_, 0);
    if (env_.sync)
      env_.sync->optimizer_step(env_.adam, adam_t_);
    else
      env_.model.update(env_.adam, adam_t_);
  }

  // Ops the model records during one chunk's pass carry that chunk; the pass is a span.
  void end_pass(size_t from, const Action& a, char ph, double t0, int m0) {
    for (size_t k = from; k < tr_.ops.size(); ++k) tr_.ops[k].chunk = a.chunk;
    const double t1 = core::now_seconds();
    if (tr_.on && env_.pipe) tr_.passes.push_back({step_, a.micro, a.chunk, ph, t0, t1, m0, mark()});
    sample_slots(t1);
  }

  StepEnv<S>& env_;
  Trace& tr_;
  std::function<void(const char*)> boundary_;
  int step_, adam_t_, m_;
  size_t n_;  // tokens of one micro-batch
  S scale_;
  std::vector<int32_t> tok_, tgt_;
  std::optional<PipeExchange<S>> pipe_;
  double loss_sum_ = 0;
};

}  // namespace

// On a device (issue 44, items 6 and 10) the step makes one host synchronisation, its end:
// actions are queued without waiting, requests are waited for by the compute stream, the
// loss stays on the device (Backend::defer_losses) and, with the trace on, every op, call,
// pass and phase boundary is a DeviceClock mark on the stream that runs it; the marks and
// the loss are read after the step's clock has stopped. Host decisions inside the step (the
// MoE counts) still download. On the host every time is the host clock's, as before.
template <typename S>
double run_step(StepEnv<S>& env, const std::vector<Action>& actions, int step, int64_t data_step,
                int adam_t, bool zero_grads) {
  Trace& tr = env.trace;
  tr.tags = TraceTags{step, 0, -1, 'F'};
  Backend<S>& be = env.model.backend();
  const bool device = be.mem() == compute::MemKind::kDevice;
  if (device && tr.on && !tr.clock) tr.clock = std::make_shared<compute::DeviceClock>();
  const bool marks = device && tr.on && be.stream() != nullptr;
  const Trace::Sizes from = tr.sizes();
  const bool deferred = device && be.defer_losses(true);
  double loss_sum = 0;
  {
    // The phases partition the step: each action's span starts where the previous one ended.
    // On a device with the trace on, a boundary is a mark on the compute stream (`ends`),
    // turned into a time after the step.
    std::vector<std::pair<const char*, int>> ends;
    double t_prev = 0;
    auto boundary = [&](const char* phase) {
      if (marks) {
        ends.emplace_back(phase, tr.mark(be.stream()));
        return;
      }
      const double t0 = t_prev;
      t_prev = core::now_seconds();
      tr.phase(phase, t0, t_prev);
    };
    StepRun<S> run(env, step, data_step, adam_t, actions, boundary);  // draws the data, off the clock
    const double t_begin = core::now_seconds();
    t_prev = t_begin;
    if (marks) tr.clock->start(be.stream(), t_begin);  // the stream is idle: the previous step ended synchronised
    env.model.set_clock(marks ? tr.clock.get() : nullptr);
    if (zero_grads) {  // counted with the forward
      env.model.zero_grad();
      boundary("forward");
    }
    run.sample_slots(t_prev);
    walk_actions(actions, 0, run);
    if (device) be.synchronize();  // the step's end: its one host wait
    const double t_end = core::now_seconds();
    env.model.set_trace(nullptr, step, 0);
    env.model.set_clock(nullptr);
    if (tr.on) {
      tr.step_start.push_back(t_begin);
      tr.step_end.push_back(t_end);
    }
    loss_sum = run.loss_sum();
    // Off the clock: the deferred losses, then the device times of the step's records.
    if (deferred) {
      loss_sum += be.take_losses();
      be.defer_losses(false);
    }
    if (marks) {
      tr.clock->resolve();
      tr.resolve_marks(from);
      double t0 = t_begin;
      for (size_t k = 0; k < ends.size(); ++k) {  // the last phase ends at the step's end
        const double t1 = k + 1 == ends.size() ? t_end : std::clamp(tr.clock->at(ends[k].second), t0, t_end);
        tr.phase(ends[k].first, t0, t1);
        t0 = t1;
      }
    }
  }
  double loss = loss_sum / env.plan.micro_batches;  // this rank's part of the mean over its micro-batches
  if (env.pipe && env.pipe->stages > 1) {  // the stages' parts summed, on every stage, off the clock
    // watched: a stage that stops while its peer sums here must end the run (exit 3), not hang it
    comm::WatchScope w(env.watch, "MPI_Allreduce (pipeline loss)", sizeof loss, "pp");
    MB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, env.pipe->pp->mpi_comm()), "pp");
  }
  return loss;
}

template double run_step<float>(StepEnv<float>&, const std::vector<Action>&, int, int64_t, int, bool);

}  // namespace meshbench::parallel
