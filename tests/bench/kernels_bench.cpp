// Google Benchmark micro-benchmarks of the step engine's CPU kernels at the shapes of the
// issue-4 benchmark models (small: C=256 T=128 B=8 V=4096; medium: C=512 T=256 B=4 V=8192).
// GEMMs report FLOP/s (2*M*N*K), attention FLOP/s of its GEMM products, the elementwise
// kernels bytes/s (bytes read + written once). Counters are rates over wall time
// (UseRealTime: OpenBLAS and OpenMP run several threads), so Google
// Benchmark divides by the measured time; nothing here computes units itself.
// Built from parallel/CMakeLists.txt because it needs meshbench_engine.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "compute/blas.hpp"
#include "kernels/flops.hpp"
#include "kernels/layers.hpp"
#include "common/config.hpp"

using namespace meshbench::parallel;
namespace compute = meshbench::compute;

namespace {

std::vector<float> rnd(size_t n, float scale = 1.0f) {
  std::mt19937 g(42);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

GptConfig shape(int64_t which) { return preset(which == 0 ? "small" : "medium"); }

// Every forward linear of the model (args: shape, gemm index), as the engine calls it.
void BM_Gemm(benchmark::State& st) {
  const GemmShape g = forward_gemms(shape(st.range(0)))[static_cast<size_t>(st.range(1))];
  auto A = rnd(static_cast<size_t>(g.M) * g.K), B = rnd(static_cast<size_t>(g.N) * g.K);
  std::vector<float> C(static_cast<size_t>(g.M) * g.N);
  for (auto _ : st) {
    compute::gemm<float>(compute::Trans::kNo, compute::Trans::kYes, g.M, g.N, g.K, 1.f, A.data(), g.K,
                         B.data(), g.K, 0.f, C.data(), g.N);
    benchmark::DoNotOptimize(C.data());
  }
  st.SetLabel(g.name + " " + std::to_string(g.M) + "x" + std::to_string(g.N) + "x" + std::to_string(g.K));
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * g.M * g.N * g.K, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionForward(benchmark::State& st) {
  const GptConfig c = shape(st.range(0));
  const int B = c.micro_batch, T = c.seq, NH = c.heads, hs = c.head_size();
  auto qkv = rnd(static_cast<size_t>(B) * T * c.qkv_width());
  std::vector<float> out(static_cast<size_t>(B) * T * c.hidden), att(static_cast<size_t>(B) * NH * T * T);
  for (auto _ : st) attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, c.kv_heads, hs);
  const double flops = 2.0 * 2 * attention_block_macs(T, hs) * B * NH;
  st.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionBackward(benchmark::State& st) {
  const GptConfig c = shape(st.range(0));
  const int B = c.micro_batch, T = c.seq, NH = c.heads, hs = c.head_size();
  auto qkv = rnd(static_cast<size_t>(B) * T * c.qkv_width()), dout = rnd(static_cast<size_t>(B) * T * c.hidden);
  std::vector<float> out(dout.size()), att(static_cast<size_t>(B) * NH * T * T), datt(att.size()), dqkv(qkv.size());
  attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, c.kv_heads, hs);
  for (auto _ : st)
    attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, NH, c.kv_heads, hs);
  const double flops = 4.0 * 2 * attention_block_macs(T, hs) * B * NH;
  st.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

// Times attention forward + backward, materialised or flash, on B samples of T positions of
// NH query and KVH key/value heads of hs; `flops` per iteration gives the FLOP/s counter.
void attention_pass(benchmark::State& st, bool flash, int B, int T, int NH, int KVH, int hs, double flops) {
  const size_t qkv_n = static_cast<size_t>(B) * T * (NH + 2 * KVH) * hs, out_n = static_cast<size_t>(B) * T * NH * hs;
  auto qkv = rnd(qkv_n), dout = rnd(out_n);
  std::vector<float> out(out_n), dqkv(qkv_n), att(flash ? 0 : static_cast<size_t>(B) * NH * T * T), datt(att.size()),
      lse(static_cast<size_t>(B) * NH * T);
  for (auto _ : st) {
    if (flash) {
      flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH, KVH, hs);
      flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, NH, KVH, hs);
    } else {
      attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, hs);
      attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, NH, KVH, hs);
    }
    benchmark::DoNotOptimize(dqkv.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

// Attention forward + backward at a long sequence (args: 0 materialised, 1 flash; T), the
// medium shape's heads (C = 512, 8 heads of 64), one sample: the T x T matrix against the
// tiles (issue 29). FLOP/s counts the causal products once, T(T+1)/2 x hs multiply-adds each
// (2 forward, 4 backward), the same for both, so the rates compare as the times do.
void BM_AttentionLong(benchmark::State& st) {
  const GptConfig c = shape(1);
  const bool flash = st.range(0) == 1;
  const int T = static_cast<int>(st.range(1)), hs = c.head_size();
  attention_pass(st, flash, 1, T, c.heads, c.kv_heads, hs, 6.0 * 2 * (double(T) * (T + 1) / 2) * hs * c.heads);
  st.SetLabel(std::string(flash ? "flash" : "materialised") + " T=" + std::to_string(T));
}

// Attention forward + backward at a benchmark shape's own sizes (args: shape 0 small, 1 medium;
// 0 materialised, 1 flash): what one layer's attention costs the step, both forms side by side.
void BM_AttentionStep(benchmark::State& st) {
  const GptConfig c = shape(st.range(0));
  const bool flash = st.range(1) == 1;
  const int hs = c.head_size();
  attention_pass(st, flash, c.micro_batch, c.seq, c.heads, c.kv_heads, hs,
                 6.0 * 2 * attention_block_macs(c.seq, hs) * c.micro_batch * c.heads);
  st.SetLabel(std::string(flash ? "flash" : "materialised") + (st.range(0) ? " medium" : " small"));
}

void BM_LayerNormForward(benchmark::State& st) {
  const GptConfig c = shape(st.range(0));
  const int N = static_cast<int>(c.tokens()), C = c.hidden;
  auto x = rnd(static_cast<size_t>(N) * C), w = rnd(C), b = rnd(C);
  std::vector<float> out(x.size()), mean(N), rstd(N);
  for (auto _ : st) layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  st.counters["bytes/s"] = benchmark::Counter(2.0 * 4 * N * C, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LayerNormBackward(benchmark::State& st) {
  const GptConfig c = shape(st.range(0));
  const int N = static_cast<int>(c.tokens()), C = c.hidden;
  auto x = rnd(static_cast<size_t>(N) * C), w = rnd(C), b = rnd(C), d = rnd(x.size());
  std::vector<float> out(x.size()), mean(N), rstd(N), dx(x.size()), dw(C), db(C);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  for (auto _ : st)
    layernorm_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  st.counters["bytes/s"] = benchmark::Counter(4.0 * 4 * N * C, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GeluForward(benchmark::State& st) {
  const GptConfig c = shape(st.range(0));
  const int64_t n = c.tokens() * c.ffn;
  auto x = rnd(static_cast<size_t>(n));
  std::vector<float> y(x.size());
  for (auto _ : st) gelu_forward(y.data(), x.data(), n);
  st.counters["bytes/s"] = benchmark::Counter(2.0 * 4 * n, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GeluBackward(benchmark::State& st) {
  const GptConfig c = shape(st.range(0));
  const int64_t n = c.tokens() * c.ffn;
  auto x = rnd(static_cast<size_t>(n)), d = rnd(static_cast<size_t>(n));
  std::vector<float> dx(x.size());
  for (auto _ : st) gelu_backward(dx.data(), x.data(), d.data(), n);
  st.counters["bytes/s"] = benchmark::Counter(3.0 * 4 * n, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_CrossEntropy(benchmark::State& st) {
  const GptConfig c = shape(st.range(0));
  const int N = static_cast<int>(c.tokens()), V = c.vocab;
  auto logits = rnd(static_cast<size_t>(N) * V);
  std::vector<float> probs(logits.size()), losses(N);
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = (i * 7919) % V;
  for (auto _ : st) {
    crossentropy_forward(probs.data(), losses.data(), logits.data(), tgt.data(), N, V);
    crossentropy_backward(probs.data(), probs.data(), tgt.data(), 1.f, N, V);
  }
  st.counters["bytes/s"] = benchmark::Counter(4.0 * 4 * N * V, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AdamW(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto p = rnd(static_cast<size_t>(n)), g = rnd(static_cast<size_t>(n));
  std::vector<float> m(p.size()), v(p.size());
  int t = 0;
  for (auto _ : st) adamw_update(p.data(), g.data(), m.data(), v.data(), n, AdamWConfig{}, 0.01, ++t);
  // reads p, g, m, v; writes p, m, v
  st.counters["bytes/s"] = benchmark::Counter(7.0 * 4 * n, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(BM_Gemm)->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionForward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionStep)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AttentionLong)->ArgsProduct({{0, 1}, {1024, 2048}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LayerNormForward)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_LayerNormBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_GeluForward)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_GeluBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_CrossEntropy)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamW)->Arg(1 << 20)->Arg(16 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
