#include "executor.hpp"

#include "core/timer.hpp"

namespace meshbench::parallel {

int64_t first_sample(const Plan& plan, int dp_rank, int micro) {
  return (int64_t{dp_rank} * plan.micro_batches + micro) * plan.model.micro_batch;
}

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
  int forwards = 0;
  for (const Action& a : actions) {
    tr.tags.micro = a.micro;
    const double t0 = t_prev;
    switch (a.kind) {
      case ActionKind::kForward: {
        tr.tags.phase = 'F';
        if (env.sync) env.sync->begin_forward(a.micro);
        env.model.set_trace(tr.on ? &tr.ops : nullptr, step, a.micro);
        loss_sum += static_cast<double>(env.model.forward(tok.data() + a.micro * n, tgt.data() + a.micro * n));
        ++forwards;
        t_prev = core::now_seconds();
        tr.phase("forward", t0, t_prev);
        break;
      }
      case ActionKind::kBackward:
        tr.tags.phase = 'B';
        if (env.sync) env.sync->begin_backward(a.micro, a.micro == m - 1);
        env.model.backward(scale, a.micro == m - 1);  // the last one syncs SP's norm gradients
        t_prev = core::now_seconds();
        tr.phase("backward", t0, t_prev);
        break;
      case ActionKind::kGradSync:
        tr.tags.phase = 'G';
        tr.tags.layer = -1;
        if (env.sync) env.sync->finish();
        t_prev = core::now_seconds();
        tr.phase("grad_sync", t0, t_prev);
        break;
      case ActionKind::kOptimizer:
        tr.tags.phase = 'O';
        env.model.set_trace(tr.on ? &tr.ops : nullptr, step, 0);
        if (env.sync)
          env.sync->optimizer_step(env.adam, adam_t);
        else
          env.model.update(env.adam, adam_t);
        env.model.backend().synchronize();
        t_prev = core::now_seconds();
        tr.phase("optimizer", t0, t_prev);
        break;
    }
  }
  env.model.set_trace(nullptr, step, 0);
  if (tr.on) {
    tr.step_start.push_back(t_begin);
    tr.step_end.push_back(t_prev);
  }
  return forwards ? loss_sum / forwards : 0.0;
}

template double run_step<float>(StepEnv<float>&, const std::vector<Action>&, int, int64_t, int, bool);

}  // namespace meshbench::parallel
