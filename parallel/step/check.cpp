#include "step/check.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/core.h>

#include "compute/device.hpp"
#include "core/error.hpp"
#include "model/step_parity.hpp"
#include "common/sharding.hpp"

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

// A rank's tensors put back into the full model's flat layout by name (sharding.hpp), with
// the elements it holds marked: tensor-parallel slices, a pipeline stage's layers, ZeRO's
// padded units and plain replicas all compare against the reference the same way.
struct InFull {
  std::vector<float> grads, params;
  std::vector<uint8_t> owned;
};

InFull in_full(const Layout& local, const std::vector<float>& grads, const std::vector<float>& params,
               const Layout& full) {
  InFull f;
  const size_t n = static_cast<size_t>(full.total());
  f.grads.assign(n, 0.f);
  f.params.assign(n, 0.f);
  f.owned.assign(n, 0);
  place_in_full(local, grads.data(), full, f.grads.data(), f.owned.data());
  place_in_full(local, params.data(), full, f.params.data(), nullptr);
  return f;
}

// The elements of entry e that `owned` marks, from a and from ref.
void owned_elements(const LayoutEntry& e, const uint8_t* owned, const float* a, const float* ref,
                    std::vector<float>& xa, std::vector<float>& xr) {
  xa.clear();
  xr.clear();
  for (int64_t i = e.offset; i < e.offset + e.numel; ++i)
    if (owned[i]) {
      xa.push_back(a[i]);
      xr.push_back(ref[i]);
    }
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
// global order, gradients accumulated, then AdamW step 1, from the canonical weights. Its
// arrays are in the full model's layout (Gpt::full_layout).
struct Reference {
  double loss = 0;
  std::vector<float> grads, params0;  // after the backward; the canonical weights before the step
  std::vector<std::vector<float>> first_logits;  // per dp rank: the logits of its first micro-batch
};

Reference run_reference(StepEnv<float>& env, const Gpt<float>& model) {
  const Plan& plan = env.plan;
  Reference out;
  Gpt<float> ref(model.config(), model.backend());
  ref.init_weights(env.seed);
  ref.moe().set_assignment(model.moe().assignment());  // --routing: the same fixed assignment
  const GptConfig& c = model.config();
  const int mb = plan.micro_batches * plan.degrees.dp;  // cp ranks share their samples
  const float scale =
      static_cast<float>(plan.grad_reduce == GradReduce::kAvg ? 1.0 / mb : 1.0 / plan.micro_batches);
  std::vector<int32_t> tok(static_cast<size_t>(c.tokens())), tgt(tok.size());
  ref.zero_grad();
  out.first_logits.resize(static_cast<size_t>(plan.degrees.dp));
  for (int j = 0; j < mb; ++j) {
    synthetic_batch(tok.data(), tgt.data(), env.data, env.seed, 0, int64_t{j} * c.micro_batch, c.micro_batch,
                    c.seq, c.vocab);
    std::vector<float>* logits = nullptr;
    if (j % plan.micro_batches == 0) {  // the first micro-batch of dp rank j / m
      logits = &out.first_logits[static_cast<size_t>(j / plan.micro_batches)];
      logits->resize(static_cast<size_t>(c.tokens() * c.vocab));
    }
    out.loss += ref.forward(tok.data(), tgt.data(), logits ? logits->data() : nullptr);
    ref.backward(scale);
  }
  out.loss /= mb;
  out.grads = ref.download_grads();
  out.params0 = ref.download_params();
  return out;
}


// The logits of this rank's first micro-batch before the step (its vocabulary columns
// [first, first + valid) under tensor parallel). ZeRO's strategies prepare their gathers per
// step, so with --zero no extra forward is run and no logits are compared; nor with pipeline
// parallel, where no rank holds the whole forward (the loss and every gradient are compared).
struct Logits {
  int dp_rank = 0, first = 0, valid = 0;
  std::vector<float> values;  // tokens x valid
};

Logits first_logits(StepEnv<float>& env) {
  Logits l;
  if (env.plan.zero > 0 || env.plan.degrees.cp > 1 || env.pipe) return l;  // (context parallel: rows of chunks)
  Gpt<float>& m = env.model;
  const GptConfig& c = m.config();
  const TpDims& d = m.tp_dims();
  std::vector<int32_t> tok(static_cast<size_t>(c.tokens())), tgt(tok.size());
  synthetic_batch(tok.data(), tgt.data(), env.data, env.seed, 0, first_sample(env.plan, env.dp_rank, 0), c.micro_batch,
                  c.seq, c.vocab);
  std::vector<float> all(static_cast<size_t>(c.tokens()) * d.vocab);
  m.forward(tok.data(), tgt.data(), all.data());
  l.dp_rank = env.dp_rank;
  l.first = d.vocab_first;
  l.valid = d.vocab_valid;
  for (int64_t i = 0; i < c.tokens(); ++i)
    l.values.insert(l.values.end(), all.begin() + i * d.vocab, all.begin() + i * d.vocab + d.vocab_valid);
  return l;
}

void send_logits(const Logits& l, MPI_Comm world) {
  int head[4] = {l.dp_rank, l.first, l.valid, static_cast<int>(l.values.size())};
  MB_CHECK_MPI(MPI_Send(head, 4, MPI_INT, 0, 900, world), "world");
  MB_CHECK_MPI(MPI_Send(l.values.data(), head[3], MPI_FLOAT, 0, 904, world), "world");
}

Logits recv_logits(int from, MPI_Comm world) {
  int head[4];
  MB_CHECK_MPI(MPI_Recv(head, 4, MPI_INT, from, 900, world, MPI_STATUS_IGNORE), "world");
  Logits l{head[0], head[1], head[2], std::vector<float>(static_cast<size_t>(head[3]))};
  MB_CHECK_MPI(MPI_Recv(l.values.data(), head[3], MPI_FLOAT, from, 904, world, MPI_STATUS_IGNORE), "world");
  return l;
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
  m64.moe().set_assignment(m32.moe().assignment());
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
  // MoE: float32 routed as float64 did (counts and kept rows per expert, exactly), so a
  // near tie that flipped a choice is named instead of showing up as a gradient error.
  auto counts = [](const MoeRouting& r) {
    std::vector<double> v(r.routed.begin(), r.routed.end());
    v.insert(v.end(), r.offsets.begin(), r.offsets.end());
    return v;
  };
  for (int l = 0; l < c.layers; ++l)
    if (c.is_moe(l)) {
      const std::vector<double> a = counts(m32.moe().routing(l)), b = counts(m64.moe().routing(l));
      rows.push_back(compare(fmt::format("moe routing h.{}", l), a.data(), b.data(), int64_t(a.size()), 0.0));
    }
  rows.push_back(compare("grads", g32.data(), m64.grads(), P, kFp64Tolerance));
  for (const auto& e : m32.layout().entries())
    rows.push_back(compare("grad:" + e.name, g32.data() + e.offset, m64.grads() + e.offset, e.numel,
                           kFp64Tolerance));
  m32.zero_grad();
  return rows;
}

namespace {

// The worst row per quantity over the ranks, in the order the quantities first appeared.
struct Worst {
  std::map<std::string, CheckRow> rows;
  std::vector<std::string> order;
  void add(CheckRow r) { merge_worst(rows, order, std::move(r)); }
};

// This rank's step of the plan up to (not including) the optimizer, then the optimizer alone:
// its gradients after the reduction (ZeRO: gathered from the shards) and its parameters after
// the optimizer, in the full layout; `loss` the global mean (every rank holds its dp x cp
// share, tensor-parallel ranks the same).
InFull local_step(StepEnv<float>& env, const std::vector<Action>& actions, const Layout& full, double& loss,
                  MPI_Comm world) {
  Gpt<float>& model = env.model;
  std::vector<Action> before(actions);
  before.erase(std::remove_if(before.begin(), before.end(),
                              [](const Action& a) { return a.kind == ActionKind::kOptimizer; }),
               before.end());
  const double mine = run_step(env, before, 0, 0, 1, true);
  const std::vector<float> grads = env.sync ? env.sync->full_grads() : model.download_grads();
  run_step(env, {{ActionKind::kOptimizer, 0, 0}}, 0, 0, 1, false);
  const std::vector<float> params = env.sync ? env.sync->full_params() : model.download_params();
  int size = 1;
  MB_CHECK_MPI(MPI_Comm_size(world, &size), "world");
  double sum = 0;
  MB_CHECK_MPI(MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, world), "world");
  loss = sum / size;
  return in_full(model.layout(), grads, params, full);
}

// Rank r's logits of its first micro-batch (its vocabulary slice) against the reference's.
void compare_logits(Worst& w, const Logits& l, const Reference& ref, const GptConfig& c) {
  if (l.values.empty()) return;
  std::vector<float> want;
  const std::vector<float>& whole = ref.first_logits.at(static_cast<size_t>(l.dp_rank));
  for (int64_t i = 0; i < c.tokens(); ++i)
    want.insert(want.end(), whole.begin() + i * c.vocab + l.first, whole.begin() + i * c.vocab + l.first + l.valid);
  w.add(compare("logits", l.values.data(), want.data(), int64_t(want.size()), kParallelTolerance));
}

void send_in_full(const InFull& f, MPI_Comm world) {
  const int n = static_cast<int>(f.grads.size());
  MB_CHECK_MPI(MPI_Send(f.grads.data(), n, MPI_FLOAT, 0, 901, world), "world");
  MB_CHECK_MPI(MPI_Send(f.params.data(), n, MPI_FLOAT, 0, 902, world), "world");
  MB_CHECK_MPI(MPI_Send(f.owned.data(), n, MPI_UINT8_T, 0, 903, world), "world");
}

InFull recv_in_full(int from, int64_t n, MPI_Comm world) {
  InFull f;
  f.grads.resize(static_cast<size_t>(n));
  f.params.resize(static_cast<size_t>(n));
  f.owned.resize(static_cast<size_t>(n));
  const int k = static_cast<int>(n);
  MB_CHECK_MPI(MPI_Recv(f.grads.data(), k, MPI_FLOAT, from, 901, world, MPI_STATUS_IGNORE), "world");
  MB_CHECK_MPI(MPI_Recv(f.params.data(), k, MPI_FLOAT, from, 902, world, MPI_STATUS_IGNORE), "world");
  MB_CHECK_MPI(MPI_Recv(f.owned.data(), k, MPI_UINT8_T, from, 903, world, MPI_STATUS_IGNORE), "world");
  return f;
}

// One rank's gradients per tensor and in all, and its parameters after its optimizer step
// against AdamW step 1 from the canonical weights and that rank's own gradients, over the
// elements it holds.
void compare_rank(Worst& w, const InFull& f, const Layout& full, const Reference& ref, const AdamWConfig& adam) {
  const std::vector<float> want_params = adamw_first_step(full, ref.params0, f.grads, adam);
  std::vector<float> xa, xr, all_a, all_r, pa, pr;
  for (const auto& e : full.entries()) {
    owned_elements(e, f.owned.data(), f.grads.data(), ref.grads.data(), xa, xr);
    if (xa.empty()) continue;  // not held on this rank (another pipeline stage)
    w.add(compare("grad:" + e.name, xa.data(), xr.data(), int64_t(xa.size()), kParallelTolerance));
    all_a.insert(all_a.end(), xa.begin(), xa.end());
    all_r.insert(all_r.end(), xr.begin(), xr.end());
    owned_elements(e, f.owned.data(), f.params.data(), want_params.data(), xa, xr);
    pa.insert(pa.end(), xa.begin(), xa.end());
    pr.insert(pr.end(), xr.begin(), xr.end());
  }
  w.add(compare("grads", all_a.data(), all_r.data(), int64_t(all_a.size()), kParallelTolerance));
  w.add(compare("params_after", pa.data(), pr.data(), int64_t(pa.size()), kParallelTolerance));
}

// Every element of every tensor must be held by some rank.
CheckRow coverage_row(const Layout& full, const std::vector<uint8_t>& covered) {
  int64_t missing = 0, total = 0;
  for (const auto& e : full.entries()) {
    total += e.numel;
    for (int64_t i = e.offset; i < e.offset + e.numel; ++i) missing += covered[size_t(i)] ? 0 : 1;
  }
  return {"coverage", double(missing), double(missing) / double(total), 0.0, missing == 0};
}

}  // namespace

std::vector<CheckRow> check_against_reference(StepEnv<float>& env, const std::vector<Action>& actions,
                                              MPI_Comm world) {
  int rank = 0, size = 1;
  MB_CHECK_MPI(MPI_Comm_rank(world, &rank), "world");
  MB_CHECK_MPI(MPI_Comm_size(world, &size), "world");
  const Layout full = Gpt<float>::full_layout(env.model.config());
  const bool trace_was = env.trace.on;
  env.trace.on = false;
  const Logits mine_logits = first_logits(env);
  double loss = 0;
  const InFull mine = local_step(env, actions, full, loss, world);
  env.trace.on = trace_was;
  std::vector<CheckRow> rows;
  if (rank != 0) {
    send_logits(mine_logits, world);
    send_in_full(mine, world);
  } else {
    const Reference ref = run_reference(env, env.model);
    Worst w;
    w.add(compare("loss", &loss, &ref.loss, 1, kParallelTolerance));
    for (int r = 0; r < size; ++r) compare_logits(w, r == 0 ? mine_logits : recv_logits(r, world), ref, env.model.config());
    std::vector<uint8_t> covered(static_cast<size_t>(full.total()), 0);
    for (int r = 0; r < size; ++r) {
      const InFull other = r == 0 ? InFull{} : recv_in_full(r, full.total(), world);
      const InFull& f = r == 0 ? mine : other;
      compare_rank(w, f, full, ref, env.adam);
      for (size_t i = 0; i < covered.size(); ++i) covered[i] |= f.owned[i];
    }
    rows.push_back(coverage_row(full, covered));
    for (const auto& q : w.order) rows.push_back(w.rows.at(q));
  }
  broadcast_rows(rows, world);
  return rows;
}

std::string run_check(const Options& o, Setup& st, StepEnv<float>& env, const core::Log& out,
                      std::vector<CheckRow>& rows) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (!o.check) return "off";
  const GptConfig& c = o.model;
  // A strategy (ZeRO, even over one rank) holds the state the fp64 check would read from the
  // model: it is checked against the single-rank reference like any parallel plan.
  const bool plain = world == 1 && !st.sync;
  if (plain && st.model->backend().mem() == compute::MemKind::kDevice) {
    // On a GPU the reference is the CPU float32 path: one whole step, normalised errors.
    const Precision prec = o.dtype == "bf16" ? Precision::kBf16 : Precision::kFp32;
    for (const auto& r : step_parity(c, st.model->backend(), prec, static_cast<unsigned>(o.seed), env.plan.flash))
      rows.push_back({"cuda_vs_cpu:" + r.op, NAN, r.rel_err, r.tolerance, r.rel_err <= r.tolerance});
  } else if (plain) {
    std::vector<int32_t> tok(static_cast<size_t>(c.tokens())), tgt(tok.size());
    synthetic_batch(tok.data(), tgt.data(), env.data, o.seed, 0, 0, c.micro_batch, c.seq, c.vocab);
    rows = check_against_fp64(*st.model, tok.data(), tgt.data());
  } else {
    rows = check_against_reference(env, st.actions, MPI_COMM_WORLD);
    st.model->init_weights(o.seed);  // the timed steps start from the canonical weights again
  }
  for (const auto& r : rows)
    if (!r.pass || r.quantity.rfind("grad:", 0) != 0)
      out.out("  check {:<32} rel {:.3e} max_abs {:.3e} tol {:.0e} {}\n", r.quantity, r.rel, r.max_abs,
              r.tolerance, r.pass ? "ok" : "FAIL");
  return all_pass(rows) ? "pass" : "fail";
}

}  // namespace meshbench::parallel
