// Tensor-parallel layers and mappings against a full single-rank reference on every rank
// (issue 10; run at 1, 2 and 4 ranks). Mappings: rank-valued tensors through the group's
// all-reduce (sum, max), all-gather and reduce-scatter, blocking and posted, compared exactly
// (integer-valued floats: every reduction order gives the same sum; as Megatron's
// test_mappings.py). Layers, for all-reduce and sequence-parallel modes (re-gather on and off)
// with overlap on and off, against the full layer within kTol (normalised L2):
//   column-parallel: the output shard against the reference output's columns, the weight and
//     bias gradient shards against the reference slices, the input gradient against the
//     reference (full rows, or this rank's rows under SP);
//   row-parallel: the output (full, or this rank's rows), the input gradient's columns and the
//     weight gradient's columns; the bias gradient bit for bit.
// Why a tolerance: a shard is a GEMM of another shape than the full layer's, and BLAS may block
// and round it differently (an 8-row GEMM is not bit-identical to those rows of a 16-row GEMM
// on an AVX-512 EPYC under OPENBLAS_CORETYPE=Haswell). The row-parallel bias gradient is the
// one bitwise comparison: both sides are the same call on the same (N, OC) gradient, since the
// sharded layer reduces (or, under SP, gathers) dY back to the full matrix first.
// Exit 0 when every comparison holds on every rank, 1 otherwise (rank 0 prints them).
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "comm/communicator.hpp"
#include "kernels/comm_group.hpp"
#include "tensor_parallel/plan.hpp"
#include "tensor_parallel/linear.hpp"
#include "common/trace.hpp"
#include "support/check_help.hpp"

using namespace meshbench::parallel;
namespace comm = meshbench::comm;
using Vec = std::vector<float>;

namespace {
int g_rank = 0, g_fail = 0;

void expect(bool ok, const std::string& what) {
  int all = ok ? 1 : 0, every = 0;
  MPI_Allreduce(&all, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!every) ++g_fail;
  if (g_rank == 0) std::printf("%s %s\n", every ? "ok  " : "FAIL", what.c_str());
}

Vec random(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double rel(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}
constexpr double kTol = 1e-6;  // fp32 GEMMs of K <= 16: observed errors are about 1e-7

// Records "label (rel E)" as passing when E <= kTol.
void expect_close(const float* a, const float* b, size_t n, const std::string& label) {
  const double e = rel(a, b, n);
  expect(e <= kTol, label + " (rel " + std::to_string(e) + ")");
}
bool same(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}
// Columns [c0, c0 + w) of a row-major (rows, cols) matrix.
Vec cols(const Vec& m, int rows, int ncols, int c0, int w) {
  Vec out(size_t(rows) * w);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < w; ++j) out[size_t(i) * w + j] = m[size_t(i) * ncols + c0 + j];
  return out;
}
Vec rows(const Vec& m, int r0, int n, int ncols) {
  return Vec(m.begin() + long(r0) * ncols, m.begin() + long(r0 + n) * ncols);
}

void mappings(CommGroup<float>& tp) {
  const int t = tp.size(), r = tp.rank(), n = 6;
  Vec x(n, float(r + 1));
  tp.all_reduce(x.data(), n);  // g forward / f backward
  expect(x == Vec(n, float(t * (t + 1) / 2)), "all-reduce of rank values: t(t+1)/2");
  Vec y(n, float(r + 1));
  tp.wait(tp.post_all_reduce(y.data(), n));
  expect(y == x, "posted all-reduce equals blocking");
  Vec mx(n, float(r * 10 - 3));
  tp.all_reduce_max(mx.data(), n);
  expect(mx == Vec(n, float((t - 1) * 10 - 3)), "all-reduce max: the last rank's value");
  Vec part(n, float(r)), full(size_t(n) * t), want(size_t(n) * t);
  for (int q = 0; q < t; ++q)
    for (int i = 0; i < n; ++i) want[size_t(q) * n + i] = float(q);
  tp.all_gather(full.data(), part.data(), n);  // SP gather (f forward under SP)
  expect(full == want, "all-gather: block q holds rank q's value");
  Vec full2(full.size());
  tp.wait(tp.post_all_gather(full2.data(), part.data(), n));
  expect(full2 == want, "posted all-gather equals blocking");
  Vec src(size_t(n) * t), mine(n), mine_want(n);
  for (size_t i = 0; i < src.size(); ++i) src[i] = float((r + 1) * (int(i) + 1));
  for (int i = 0; i < n; ++i) mine_want[size_t(i)] = float(t * (t + 1) / 2 * (r * n + i + 1));
  tp.reduce_scatter(mine.data(), src.data(), n);  // SP scatter (g forward under SP)
  expect(mine == mine_want, "reduce-scatter: rank r's block of the sum");
  Vec mine2(n);
  tp.wait(tp.post_reduce_scatter(mine2.data(), src.data(), n));
  expect(mine2 == mine_want, "posted reduce-scatter equals blocking");
}

void column(CommGroup<float>* tp, const TpMode& m, const std::string& label) {
  Backend<float>& be = cpu_backend<float>();
  const int t = tp ? tp->size() : 1, r = tp ? tp->rank() : 0;
  const int N = 8, C = 8, OC = 16, ol = OC / t, n = m.sp ? N / t : N;
  const Vec X = random(size_t(N) * C, 1), W = random(size_t(OC) * C, 2), b = random(OC, 3), dY = random(size_t(N) * OC, 4);
  // The reference, full shape.
  Vec Y(size_t(N) * OC), dX(size_t(N) * C), dW(size_t(OC) * C, 0.f), db(OC, 0.f);
  be.matmul_forward(Y.data(), X.data(), W.data(), b.data(), N, C, OC, false);
  be.matmul_backward(dX.data(), dW.data(), db.data(), dY.data(), X.data(), W.data(), N, C, OC);
  // This rank's shard.
  const Vec w = rows(W, r * ol, ol, C), bl(b.begin() + r * ol, b.begin() + (r + 1) * ol);
  const Vec x = m.sp ? rows(X, r * n, n, C) : X, dy = cols(dY, N, OC, r * ol, ol);
  Vec y(size_t(N) * ol), xfull(size_t(N) * C), dx(size_t(N) * C), dxfull(size_t(N) * C), dw(size_t(ol) * C, 0.f), dbl(ol, 0.f);
  column_forward<float>(be, {}, tp, m, y.data(), x.data(), xfull.data(), w.data(), bl.data(), N, C, ol);
  if (m.sp && m.regather) std::fill(xfull.begin(), xfull.end(), NAN);  // the backward must gather it again
  column_backward<float>(be, {}, tp, m, dx.data(), dxfull.data(), dw.data(), dbl.data(), dy.data(), x.data(), xfull.data(),
                         w.data(), N, C, ol);
  const Vec ys = cols(Y, N, OC, r * ol, ol), dws = rows(dW, r * ol, ol, C), dbs(db.begin() + r * ol, db.begin() + (r + 1) * ol);
  const Vec dxs = m.sp ? rows(dX, r * n, n, C) : dX;
  expect_close(y.data(), ys.data(), ys.size(), label + " column: output shard == reference columns");
  expect_close(dw.data(), dws.data(), dws.size(), label + " column: weight-gradient shard == reference rows");
  expect_close(dbl.data(), dbs.data(), dbs.size(), label + " column: bias-gradient shard == reference slice");
  expect_close(dx.data(), dxs.data(), dxs.size(), label + " column: input gradient == reference" + (m.sp ? " rows" : ""));
}

void row(CommGroup<float>* tp, const TpMode& m, const std::string& label) {
  Backend<float>& be = cpu_backend<float>();
  const int t = tp ? tp->size() : 1, r = tp ? tp->rank() : 0;
  const int N = 8, K = 16, OC = 8, kl = K / t, n = m.sp ? N / t : N;
  const Vec X = random(size_t(N) * K, 5), W = random(size_t(OC) * K, 6), b = random(OC, 7), R = random(size_t(N) * OC, 8),
            dY = random(size_t(N) * OC, 9);
  Vec Y = R, dX(size_t(N) * K), dW(size_t(OC) * K, 0.f), db(OC, 0.f);
  be.matmul_forward(Y.data(), X.data(), W.data(), b.data(), N, K, OC, true);  // residual + linear
  be.matmul_backward(dX.data(), dW.data(), db.data(), dY.data(), X.data(), W.data(), N, K, OC);
  const Vec x = cols(X, N, K, r * kl, kl), w = cols(W, OC, K, r * kl, kl);
  Vec y = m.sp ? rows(R, r * n, n, OC) : R;
  Vec scratch(size_t(N + n) * OC), dx(size_t(N) * kl), dw(size_t(OC) * kl, 0.f), dbl(OC, 0.f), dyfull(size_t(N) * OC);
  row_forward<float>(be, {}, tp, m, y.data(), x.data(), w.data(), b.data(), N, kl, OC, scratch.data());
  const Vec dy = m.sp ? rows(dY, r * n, n, OC) : dY;
  row_backward<float>(be, {}, tp, m, dx.data(), dw.data(), dbl.data(), dy.data(), dyfull.data(), x.data(), w.data(), N, kl, OC);
  const Vec ys = m.sp ? rows(Y, r * n, n, OC) : Y, dxs = cols(dX, N, K, r * kl, kl), dws = cols(dW, OC, K, r * kl, kl);
  expect_close(y.data(), ys.data(), ys.size(), label + " row: output == reference" + (m.sp ? " rows" : ""));
  expect_close(dx.data(), dxs.data(), dxs.size(), label + " row: input-gradient columns == reference");
  expect_close(dw.data(), dws.data(), dws.size(), label + " row: weight-gradient columns == reference");
  // Same call, same shapes: matmul_backward's bias reduction over the full (N, OC) dY.
  expect(same(dbl.data(), db.data(), db.size()), label + " row: bias gradient == reference (bitwise)");
}
}  // namespace

int main(int argc, char** argv) {
  if (meshbench::tests::answered_help(argc, argv,
                                      "usage: mpiexec -n T build/tests/tp_layers_check\n"
                                      "  the tensor-parallel linears and mappings at T ranks against the full reference (ctest\n"
                                      "  mpi.tp_layers_check_{1,2,4}): exit 0 within tolerance, 1 otherwise\n"))
    return 0;
  MPI_Init(&argc, &argv);
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  {
    Trace trace;
    RecordingComm rec(comm::make_mpi_communicator(MPI_COMM_WORLD, "tp"), trace, "tp", 0);
    CommGroup<float> group(rec, cpu_backend<float>(), &trace.tags);
    CommGroup<float>* tp = size > 1 ? &group : nullptr;  // one rank: the plain path
    if (tp) mappings(group);
    struct Case {
      TpMode mode;
      const char* name;
    };
    for (const Case& c : {Case{{false, true, true}, "AR overlap"}, Case{{false, true, false}, "AR no-overlap"},
                          Case{{true, true, true}, "SP regather overlap"}, Case{{true, true, false}, "SP regather no-overlap"},
                          Case{{true, false, true}, "SP keep overlap"}, Case{{true, false, false}, "SP keep no-overlap"}}) {
      if (!tp && c.mode.sp) continue;
      const std::string label = "t=" + std::to_string(size) + " " + c.name;
      column(tp, c.mode, label);
      row(tp, c.mode, label);
    }
  }
  if (g_rank == 0) std::printf("%s: %d failed\n", g_fail ? "FAIL" : "PASS", g_fail);
  MPI_Finalize();
  return g_fail ? 1 : 0;
}
