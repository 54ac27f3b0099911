// harness_bench: the collective driver's own cost per timed iteration, in ns, so it can be
// stated against the smallest all-reduce latency (about 0.3 us at 2 ranks on shared memory,
// docs/testing.md). What one isolated iteration adds besides the call and the barrier:
//   - a pair of timer marks (the MPI backend's HostTimer from make_mpi_communicator on
//     MPI_COMM_SELF, and the raw core::now_seconds() pair it wraps), plus elapsed();
//   - storing the sample into the per-iteration vector;
// and, once per size, core::summarize() over the gathered [iters x ranks] array.
// The hang watchdog (--op-timeout, issue 15) adds a watched Communicator around every call:
// BM_SelfAllReduce/0 is the call as the driver made it before (the MPI backend, an 8 B
// all-reduce on MPI_COMM_SELF), /1 the same through comm::make_watched with the watchdog
// thread polling; BM_WatchBeginEnd is the record's own cost.
// Single process (MPI_COMM_SELF): no cross-rank iteration counts to agree on.
// Run: build/bin/harness_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <memory>
#include <random>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/watched_comm.hpp"
#include "core/op_watch.hpp"
#include "core/stats.hpp"
#include "core/timer.hpp"

namespace {

namespace mc = meshbench::comm;
namespace core = meshbench::core;

std::unique_ptr<mc::Communicator>& self_comm() {
  static std::unique_ptr<mc::Communicator> c = mc::make_mpi_communicator(MPI_COMM_SELF, "self");
  return c;
}

// Seconds per driver iteration (shown with an SI prefix, e.g. 80n): CPU time over
// benchmark iterations x driver iterations.
benchmark::Counter per_iteration(const benchmark::State& state, int iters) {
  return benchmark::Counter(static_cast<double>(state.iterations()) * iters,
                            benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// One raw clock read pair: what a host mark pair costs at the bottom.
void BM_NowSecondsPair(benchmark::State& state) {
  for (auto _ : state) {
    double a = core::now_seconds();
    double b = core::now_seconds();
    benchmark::DoNotOptimize(b - a);
  }
}
BENCHMARK(BM_NowSecondsPair);

// The driver's sequence around one isolated call: mark(0), [call], mark(1), sync(), elapsed().
void BM_HostTimerMarkPair(benchmark::State& state) {
  auto timer = self_comm()->make_timer(2);
  for (auto _ : state) {
    timer->mark(0);
    timer->mark(1);
    timer->sync();
    benchmark::DoNotOptimize(timer->elapsed(0, 1));
  }
}
BENCHMARK(BM_HostTimerMarkPair);

// The whole per-iteration bookkeeping of the isolated loop, without the call and barrier:
// marks, sync, elapsed and the store into the per-iteration vector (iters = range(0)).
void BM_IsolatedIterationBookkeeping(benchmark::State& state) {
  const int iters = static_cast<int>(state.range(0));
  auto timer = self_comm()->make_timer(iters + 1);
  std::vector<double> mine(static_cast<std::size_t>(iters));
  for (auto _ : state) {
    for (int i = 0; i < iters; ++i) {
      timer->mark(0);
      timer->mark(1);
      timer->sync();
      mine[static_cast<std::size_t>(i)] = timer->elapsed(0, 1);
    }
    benchmark::DoNotOptimize(mine.data());
    benchmark::ClobberMemory();
  }
  state.counters["per_iter"] = per_iteration(state, iters);
}
BENCHMARK(BM_IsolatedIterationBookkeeping)->Arg(20)->Arg(1000);

// The pipelined loop: one mark per call, elapsed() per iteration afterwards.
void BM_PipelinedIterationBookkeeping(benchmark::State& state) {
  const int iters = static_cast<int>(state.range(0));
  auto timer = self_comm()->make_timer(iters + 1);
  std::vector<double> mine(static_cast<std::size_t>(iters));
  for (auto _ : state) {
    timer->mark(0);
    for (int i = 0; i < iters; ++i) timer->mark(i + 1);
    timer->sync();
    for (int i = 0; i < iters; ++i) mine[static_cast<std::size_t>(i)] = timer->elapsed(i, i + 1);
    benchmark::DoNotOptimize(mine.data());
    benchmark::ClobberMemory();
  }
  state.counters["per_iter"] = per_iteration(state, iters);
}
BENCHMARK(BM_PipelinedIterationBookkeeping)->Arg(20)->Arg(1000);

// Once per size on rank 0: the transpose the driver does from [rank][iter] to [iter][rank]
// and summarize() over it (median, min, mean, p99 and the slowest rank).
void BM_Summarize(benchmark::State& state) {
  const int iters = static_cast<int>(state.range(0)), ranks = static_cast<int>(state.range(1));
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> t(-11.0, 0.3);  // ~17 us samples with a tail
  std::vector<double> by_rank(static_cast<std::size_t>(iters) * static_cast<std::size_t>(ranks));
  for (double& x : by_rank) x = t(rng);
  std::vector<double> by_iter(by_rank.size());
  for (auto _ : state) {
    for (int rk = 0; rk < ranks; ++rk)
      for (int i = 0; i < iters; ++i)
        by_iter[static_cast<std::size_t>(i * ranks + rk)] = by_rank[static_cast<std::size_t>(rk * iters + i)];
    core::SampleSummary s = core::summarize(by_iter, iters, ranks);
    benchmark::DoNotOptimize(s);
  }
  state.counters["per_iter"] = per_iteration(state, iters);
}
BENCHMARK(BM_Summarize)->Args({20, 2})->Args({20, 8})->Args({100, 64})->Args({1000, 512});

// The watchdog's record per call: begin() and end(), a handful of relaxed atomic stores.
void BM_WatchBeginEnd(benchmark::State& state) {
  core::OpWatch watch;
  for (auto _ : state) {
    std::uint64_t s = watch.begin("all_reduce", 8, "self");
    watch.end(s);
  }
}
BENCHMARK(BM_WatchBeginEnd);

// One 8 B all-reduce on MPI_COMM_SELF through the backend (0) or through the watched
// Communicator with a running watchdog (1): the difference is what --op-timeout costs a call.
void BM_SelfAllReduce(benchmark::State& state) {
  core::OpWatch watch;
  std::unique_ptr<mc::Communicator> comm = mc::make_mpi_communicator(MPI_COMM_SELF, "self");
  if (state.range(0)) {
    comm = mc::make_watched(std::move(comm), watch);
    watch.start(300, [](const core::Hang&) {});
  }
  float in[2] = {1, 2}, out[2] = {0, 0};
  mc::View send{in, 2, mc::DType::kFloat, meshbench::compute::MemKind::kHost};
  mc::View recv{out, 2, mc::DType::kFloat, meshbench::compute::MemKind::kHost};
  for (auto _ : state) {
    comm->all_reduce(send, recv, mc::RedOp::kSum);
    benchmark::DoNotOptimize(out);
  }
  comm.reset();
  watch.stop();
}
BENCHMARK(BM_SelfAllReduce)->Arg(0)->Arg(1);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    MPI_Finalize();
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  self_comm().reset();
  MPI_Finalize();
  return 0;
}
