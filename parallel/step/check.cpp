#include "check.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.hpp"

namespace meshbench::parallel {

template <typename A, typename R>
double rel_err(const A* a, const R* ref, int64_t n, double* max_abs) {
  double num = 0, den = 0, mx = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
    mx = std::max(mx, std::abs(d));
  }
  if (max_abs) *max_abs = mx;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
template double rel_err<float, double>(const float*, const double*, int64_t, double*);
template double rel_err<float, float>(const float*, const float*, int64_t, double*);
template double rel_err<double, double>(const double*, const double*, int64_t, double*);

bool all_pass(const std::vector<CheckRow>& rows) {
  return std::all_of(rows.begin(), rows.end(), [](const CheckRow& r) { return r.pass; });
}

namespace {
template <typename A, typename R>
CheckRow compare(std::string q, const A* a, const R* ref, int64_t n, double tol) {
  CheckRow r{std::move(q), 0, 0, tol, false};
  r.rel = rel_err(a, ref, n, &r.max_abs);
  r.pass = r.rel <= tol;  // NaN fails
  return r;
}

// The tensors of a flat array in layout order, without the padding between them, so two
// layouts of the same model (ZeRO pads its units) compare tensor by tensor.
std::vector<float> pack(const Layout& layout, const std::vector<float>& flat) {
  std::vector<float> out;
  for (const auto& e : layout.entries())
    out.insert(out.end(), flat.begin() + e.offset, flat.begin() + e.offset + e.numel);
  return out;
}

// Keeps, per quantity, the worst row seen (over ranks).
void merge_worst(std::map<std::string, CheckRow>& worst, std::vector<std::string>& order, CheckRow r) {
  auto it = worst.find(r.quantity);
  if (it == worst.end()) {
    order.push_back(r.quantity);
    worst.emplace(r.quantity, std::move(r));
  } else if (!(r.rel <= it->second.rel)) {
    it->second = std::move(r);
  }
}
// The single-rank reference: the global batch as m x dp micro-batches of b samples in the
// global order, gradients accumulated, then AdamW step 1, from the canonical weights.
struct Reference {
  double loss = 0;
  std::vector<float> grads, params;  // packed (tensors only)
};

Reference run_reference(StepEnv<float>& env, const Gpt<float>& model) {
  const Plan& plan = env.plan;
  Reference out;
  Gpt<float> ref(model.config(), model.backend());
  ref.init_weights(env.seed);
  const GptConfig& c = model.config();
  const int mb = plan.micro_batches * plan.degrees.dp * plan.degrees.cp;
  const float scale =
      static_cast<float>(plan.grad_reduce == GradReduce::kAvg ? 1.0 / mb : 1.0 / plan.micro_batches);
  std::vector<int32_t> tok(static_cast<size_t>(c.tokens())), tgt(tok.size());
  double ref_loss = 0;
  ref.zero_grad();
  for (int j = 0; j < mb; ++j) {
    synthetic_batch(tok.data(), tgt.data(), env.data, env.seed, 0, int64_t{j} * c.micro_batch, c.micro_batch,
                    c.seq, c.vocab);
    ref_loss += ref.forward(tok.data(), tgt.data());
    ref.backward(scale);
  }
  ref_loss /= mb;
  const std::vector<float> ref_grads = pack(ref.layout(), ref.download_grads());
  ref.update(env.adam, 1);
  const std::vector<float> ref_params = pack(ref.layout(), ref.download_params());

  out.loss = ref_loss;
  out.grads = ref_grads;
  out.params = ref_params;
  return out;
}

// Every rank learns the verdict (and the rows, for its exit code and output).
void broadcast_rows(std::vector<CheckRow>& rows, MPI_Comm world) {
  int n = static_cast<int>(rows.size());
  MB_CHECK_MPI(MPI_Bcast(&n, 1, MPI_INT, 0, world), "world");
  rows.resize(static_cast<size_t>(n));
  for (auto& r : rows) {
    double v[3] = {r.max_abs, r.rel, r.tolerance};
    int pass = r.pass;
    MB_CHECK_MPI(MPI_Bcast(v, 3, MPI_DOUBLE, 0, world), "world");
    MB_CHECK_MPI(MPI_Bcast(&pass, 1, MPI_INT, 0, world), "world");
    int len = static_cast<int>(r.quantity.size());
    MB_CHECK_MPI(MPI_Bcast(&len, 1, MPI_INT, 0, world), "world");
    r.quantity.resize(static_cast<size_t>(len));
    MB_CHECK_MPI(MPI_Bcast(r.quantity.data(), len, MPI_CHAR, 0, world), "world");
    r.max_abs = v[0];
    r.rel = v[1];
    r.tolerance = v[2];
    r.pass = pass != 0;
  }
}

}  // namespace

std::vector<CheckRow> check_against_fp64(Gpt<float>& m32, const int32_t* tok, const int32_t* tgt) {
  const GptConfig& c = m32.config();
  Gpt<double> m64(c);
  const int64_t P = m32.layout().total(), NV = c.tokens() * c.vocab;
  const std::vector<float> p32 = m32.download_params();
  const std::vector<double> p64(p32.begin(), p32.end());
  m64.upload_params(p64.data());
  std::vector<float> logits32(static_cast<size_t>(NV));
  std::vector<double> logits64(static_cast<size_t>(NV));
  m32.zero_grad();
  const float loss32 = m32.forward(tok, tgt, logits32.data());
  m32.backward();
  m64.zero_grad();
  const double loss64 = m64.forward(tok, tgt, logits64.data());
  m64.backward();
  const std::vector<float> g32 = m32.download_grads();
  std::vector<CheckRow> rows;
  rows.push_back(compare("loss", &loss32, &loss64, 1, kFp64Tolerance));
  rows.push_back(compare("logits", logits32.data(), logits64.data(), NV, kFp64Tolerance));
  rows.push_back(compare("grads", g32.data(), m64.grads(), P, kFp64Tolerance));
  for (const auto& e : m32.layout().entries())
    rows.push_back(compare("grad:" + e.name, g32.data() + e.offset, m64.grads() + e.offset, e.numel,
                           kFp64Tolerance));
  m32.zero_grad();
  return rows;
}

std::vector<CheckRow> check_against_reference(StepEnv<float>& env, const std::vector<Action>& actions,
                                              MPI_Comm world) {
  int rank = 0, size = 1;
  MB_CHECK_MPI(MPI_Comm_rank(world, &rank), "world");
  MB_CHECK_MPI(MPI_Comm_size(world, &size), "world");
  Gpt<float>& model = env.model;
  const int64_t P = model.num_params();  // packed: tensors only
  const bool trace_was = env.trace.on;
  env.trace.on = false;

  // The plan's step up to (not including) the optimizer, then the optimizer alone.
  std::vector<Action> before(actions), opt;
  before.erase(std::remove_if(before.begin(), before.end(),
                              [](const Action& a) { return a.kind == ActionKind::kOptimizer; }),
               before.end());
  opt.push_back({ActionKind::kOptimizer, 0, 0});
  double loss = run_step(env, before, 0, 0, 1, true);
  // Every rank's gradients after the reduction, gathered to full shape (ZeRO: from the shards).
  const std::vector<float> grads = pack(model.layout(), env.sync ? env.sync->full_grads() : model.download_grads());
  run_step(env, opt, 0, 0, 1, false);
  const std::vector<float> params = pack(model.layout(), env.sync ? env.sync->full_params() : model.download_params());
  env.trace.on = trace_was;
  // The global mean loss: every rank of a dp x cp group holds its share.
  double loss_sum = 0;
  MB_CHECK_MPI(MPI_Allreduce(&loss, &loss_sum, 1, MPI_DOUBLE, MPI_SUM, world), "world");
  loss = loss_sum / size;

  std::vector<CheckRow> rows;
  if (rank == 0) {
    const Reference ref = run_reference(env, model);
    const double ref_loss = ref.loss;
    const std::vector<float>& ref_grads = ref.grads;
    const std::vector<float>& ref_params = ref.params;
    std::map<std::string, CheckRow> worst;
    std::vector<std::string> order;
    merge_worst(worst, order, compare("loss", &loss, &ref_loss, 1, kParallelTolerance));
    std::vector<float> g(static_cast<size_t>(P)), p(static_cast<size_t>(P));
    for (int r = 0; r < size; ++r) {
      if (r == 0) {
        g = grads;
        p = params;
      } else {
        MB_CHECK_MPI(MPI_Recv(g.data(), static_cast<int>(P), MPI_FLOAT, r, 901, world, MPI_STATUS_IGNORE), "world");
        MB_CHECK_MPI(MPI_Recv(p.data(), static_cast<int>(P), MPI_FLOAT, r, 902, world, MPI_STATUS_IGNORE), "world");
      }
      merge_worst(worst, order, compare("grads", g.data(), ref_grads.data(), P, kParallelTolerance));
      int64_t at = 0;
      for (const auto& e : model.layout().entries()) {
        merge_worst(worst, order, compare("grad:" + e.name, g.data() + at, ref_grads.data() + at, e.numel,
                                          kParallelTolerance));
        at += e.numel;
      }
      merge_worst(worst, order, compare("params_after", p.data(), ref_params.data(), P, kParallelTolerance));
    }
    for (const auto& q : order) rows.push_back(worst.at(q));
  } else {
    MB_CHECK_MPI(MPI_Send(grads.data(), static_cast<int>(P), MPI_FLOAT, 0, 901, world), "world");
    MB_CHECK_MPI(MPI_Send(params.data(), static_cast<int>(P), MPI_FLOAT, 0, 902, world), "world");
  }
  broadcast_rows(rows, world);
  return rows;
}

}  // namespace meshbench::parallel
