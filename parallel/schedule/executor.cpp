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
  std::vector<int32_t> tok(static_cast<size_t>(c.tokens())), tgt(tok.size());
  const S scale = static_cast<S>(env.dp ? DataParallel<S>::loss_scale(env.plan) : 1.0 / m);
  Trace& tr = env.trace;
  tr.tags = TraceTags{step, 0, -1, 'F'};
  double loss_sum = 0;
  const double t_begin = core::now_seconds();
  if (zero_grads) {  // counted with the forward, so the phases add up to the step
    env.model.zero_grad();
    tr.phase("forward", t_begin, core::now_seconds());
  }
  int forwards = 0;
  for (const Action& a : actions) {
    tr.tags.micro = a.micro;
    const double t0 = core::now_seconds();
    switch (a.kind) {
      case ActionKind::kForward: {
        tr.tags.phase = 'F';
        synthetic_batch(tok.data(), tgt.data(), env.data, env.seed, data_step,
                        first_sample(env.plan, env.dp_rank, a.micro), c.micro_batch, c.seq, c.vocab);
        env.model.set_trace(tr.on ? &tr.ops : nullptr, step, a.micro);
        loss_sum += static_cast<double>(env.model.forward(tok.data(), tgt.data()));
        ++forwards;
        tr.phase("forward", t0, core::now_seconds());
        break;
      }
      case ActionKind::kBackward:
        tr.tags.phase = 'B';
        if (env.dp) env.dp->begin_backward(a.micro == m - 1);
        env.model.backward(scale);
        tr.phase("backward", t0, core::now_seconds());
        break;
      case ActionKind::kGradSync:
        tr.tags.phase = 'G';
        tr.tags.layer = -1;
        if (env.dp) env.dp->finish();
        tr.phase("grad_sync", t0, core::now_seconds());
        break;
      case ActionKind::kOptimizer:
        tr.tags.phase = 'O';
        env.model.set_trace(tr.on ? &tr.ops : nullptr, step, 0);
        env.model.update(env.adam, adam_t);
        env.model.backend().synchronize();
        tr.phase("optimizer", t0, core::now_seconds());
        break;
    }
  }
  env.model.set_trace(nullptr, step, 0);
  if (tr.on) {
    tr.step_start.push_back(t_begin);
    tr.step_end.push_back(core::now_seconds());
  }
  return forwards ? loss_sum / forwards : 0.0;
}

template double run_step<float>(StepEnv<float>&, const std::vector<Action>&, int, int64_t, int, bool);

}  // namespace meshbench::parallel
