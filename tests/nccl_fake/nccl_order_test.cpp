// The NCCL backend's call order and in-place offsets without a GPU (issue 17): the real
// src/comm/nccl_comm.cu and src/compute/device_cuda.cu are compiled into this test against
// the real CUDA and NCCL headers, and every CUDA runtime, NCCL and MPI function they call is
// defined as a fake that records the call in fakes.hpp (a link-time seam: the executable's
// definitions take the place of libcudart's, libnccl's and libmpi's). No line of the
// backend changes for the test. The tests then assert what NCCL's documentation requires:
// - in-place all-gather: sendbuff == recvbuff + rank * sendcount; in-place reduce-scatter:
//   recvbuff == sendbuff + rank * recvcount, at ranks > 0, with the windows the collective
//   driver's plug-ins compute;
// - every collective and send/recv is queued on the communicator's own non-blocking stream;
// - grouped send/recv (all-to-all, send/recv, all-to-all-v) with the right peers and offsets,
//   and RecordingComm's bytes of an all-to-all-v (the bytes actually sent);
// - order_after(): an event recorded on the producer's stream that the NCCL stream waits on,
//   before the next collective;
// - uploads (Buffer::upload) complete before the collective is queued, and synchronize()
//   drains the legacy stream and the NCCL stream before a download reads the result.
// Built only where nccl.h exists (tests/CMakeLists.txt); runs anywhere (no device is touched).
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <gtest/gtest.h>

#include <map>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

// The code under test, compiled in this translation unit against the fakes below.
#include "comm/nccl_comm.cu"
#include "compute/device_cuda.cu"
#include "runner.hpp"
#include "spec.hpp"
#if MB_TEST_RECORDING_COMM
#include <cstring>
#include <map>

#include "data_parallel/data_parallel.hpp"
#include "executor/executor.hpp"
#include "kernels/backend_forwarding.hpp"
#include "kernels/comm_group.hpp"
#include "model/model.hpp"
#include "pipeline_parallel/exchange.hpp"
#include "pipeline_parallel/schedule.hpp"
#include "common/trace.hpp"
#endif

// The recorded calls and the fakes of every CUDA, NCCL and MPI function the code calls.
#include "fakes.hpp"

namespace {

namespace mc = meshbench::comm;
namespace mcol = meshbench::collectives;
using meshbench::compute::MemKind;

constexpr std::size_t kF = sizeof(float);

// A communicator at (rank, size) on the fakes, and the stream it queues on.
struct Fixture {
  std::unique_ptr<mc::Communicator> comm;
  const void* stream = nullptr;
  Fixture(int rank, int size) {
    g = FakeWorld{};
    g.rank = rank;
    g.size = size;
    comm = mc::make_nccl_communicator(MPI_COMM_WORLD, "world", 0);
    for (const Call& c : g.calls)
      if (c.fn == "streamCreateNonBlocking") stream = c.stream;
    g.clear();
  }
};

const std::byte* at(const void* base, std::size_t bytes) { return static_cast<const std::byte*>(base) + bytes; }

std::vector<std::string> names(const std::vector<Call>& calls) {
  std::vector<std::string> out;
  for (const Call& c : calls) out.push_back(c.fn);
  return out;
}

TEST(NcclOrder, CommunicatorQueuesOnItsOwnNonBlockingStream) {
  Fixture f(1, 2);
  ASSERT_NE(f.stream, nullptr) << "the communicator did not create a non-blocking stream";
  std::vector<float> a(8), b(8);
  mc::View s{a.data(), 8, mc::DType::kFloat, MemKind::kDevice}, r{b.data(), 8, mc::DType::kFloat, MemKind::kDevice};
  f.comm->all_reduce(s, r, mc::RedOp::kSum);
  f.comm->all_gather(s.slice(0, 4), r);
  f.comm->reduce_scatter(s, r.slice(0, 4), mc::RedOp::kSum);
  f.comm->broadcast(s, r, 1);
  f.comm->all_to_all(s, r);
  f.comm->sendrecv(s, 0, r, 0);
  int queued = 0;
  for (const Call& c : g.calls) {
    if (c.fn == "groupStart" || c.fn == "groupEnd") continue;
    EXPECT_EQ(c.stream, f.stream) << c.fn << " was queued on another stream";
    ++queued;
  }
  EXPECT_EQ(queued, 4 + 2 * 2 + 2);
}

// The driver's in-place windows at every rank > 0 meet NCCL's in-place rules.
TEST(NcclOrder, InPlaceAllGatherAndReduceScatterOffsetsAtRanksAboveZero) {
  for (int n : {2, 4}) {
    for (int rank = 1; rank < n; ++rank) {
      Fixture f(rank, n);
      const std::size_t count = 6 * static_cast<std::size_t>(n);  // size-column elements
      std::vector<float> mem(count * 2);
      mc::View buffer{mem.data(), 0, mc::DType::kFloat, MemKind::kDevice};
      mcol::Inputs in;

      const mcol::Spec& ag = mcol::all_gather_spec();
      mcol::Layout lg = ag.layout(count, n);
      buffer.count = ag.inplace_buffer(lg);
      mcol::Views vg = ag.inplace(*f.comm, buffer, lg);
      ag.call(*f.comm, vg, in);
      ASSERT_EQ(g.calls.size(), 1u);
      const Call& cg = g.calls[0];
      EXPECT_EQ(cg.fn, "allGather");
      EXPECT_EQ(cg.b, mem.data());
      EXPECT_EQ(cg.count, lg.send);
      EXPECT_EQ(cg.a, at(mem.data(), rank * cg.count * kF)) << "n=" << n << " rank=" << rank;

      g.clear();
      const mcol::Spec& rs = mcol::reduce_scatter_spec();
      mcol::Layout lr = rs.layout(count, n);
      buffer.count = rs.inplace_buffer(lr);
      mcol::Views vr = rs.inplace(*f.comm, buffer, lr);
      in.op = mc::RedOp::kSum;
      rs.call(*f.comm, vr, in);
      ASSERT_EQ(g.calls.size(), 1u);
      const Call& cr = g.calls[0];
      EXPECT_EQ(cr.fn, "reduceScatter");
      EXPECT_EQ(cr.a, mem.data());
      EXPECT_EQ(cr.count, lr.recv);
      EXPECT_EQ(cr.b, at(mem.data(), rank * cr.count * kF)) << "n=" << n << " rank=" << rank;
      EXPECT_EQ(f.comm->reduce_scatter_inplace_offset(cr.count), rank * cr.count);
    }
  }
}

TEST(NcclOrder, AllToAllIsGroupedSendRecvPerPeerWithBlockOffsets) {
  Fixture f(1, 3);
  std::vector<float> a(12), b(12);
  mc::View s{a.data(), 12, mc::DType::kFloat, MemKind::kDevice}, r{b.data(), 12, mc::DType::kFloat, MemKind::kDevice};
  f.comm->all_to_all(s, r);
  ASSERT_EQ(g.calls.size(), 2u + 2u * 3u);
  EXPECT_EQ(g.calls.front().fn, "groupStart");
  EXPECT_EQ(g.calls.back().fn, "groupEnd");
  for (int p = 0; p < 3; ++p) {
    const Call& snd = g.calls[1 + 2 * static_cast<std::size_t>(p)];
    const Call& rcv = g.calls[2 + 2 * static_cast<std::size_t>(p)];
    EXPECT_EQ(snd.fn, "send");
    EXPECT_EQ(rcv.fn, "recv");
    EXPECT_EQ(snd.peer, p);
    EXPECT_EQ(rcv.peer, p);
    EXPECT_EQ(snd.count, 4u);
    EXPECT_EQ(snd.a, at(a.data(), p * 4 * kF));
    EXPECT_EQ(rcv.b, at(b.data(), p * 4 * kF));
  }
}

TEST(NcclOrder, SendRecvIsOneGroup) {
  Fixture f(2, 4);
  std::vector<float> a(5), b(5);
  mc::View s{a.data(), 5, mc::DType::kFloat, MemKind::kDevice}, r{b.data(), 5, mc::DType::kFloat, MemKind::kDevice};
  f.comm->sendrecv(s, 3, r, 1);
  EXPECT_EQ(names(g.calls), (std::vector<std::string>{"groupStart", "send", "recv", "groupEnd"}));
  EXPECT_EQ(g.calls[1].peer, 3);
  EXPECT_EQ(g.calls[2].peer, 1);
  EXPECT_EQ(g.calls[1].a, a.data());
  EXPECT_EQ(g.calls[2].b, b.data());
}

// Issue 30, defect 3: a pipeline's send-then-receive is one group on the stream (two stages
// facing each other each post a send then a receive; ungrouped, each send waits for the
// other's receive behind it), with each op's own peer, and two requests behind it.
TEST(NcclOrder, PipelineSendThenReceiveIsOneGroup) {
  Fixture f(1, 2);
  std::vector<float> a(6), b(6);
  mc::View s{a.data(), 6, mc::DType::kFloat, MemKind::kDevice}, r{b.data(), 6, mc::DType::kFloat, MemKind::kDevice};
  auto [sq, rq] = f.comm->isend_irecv(s, 0, 7, r, 0, 4);
  ASSERT_TRUE(sq && rq);
  const std::vector<std::string> got = names(g.calls);
  ASSERT_GE(got.size(), 4u);
  EXPECT_EQ((std::vector<std::string>(got.begin(), got.begin() + 4)),
            (std::vector<std::string>{"groupStart", "send", "recv", "groupEnd"}));
  EXPECT_EQ(g.calls[1].a, a.data());
  EXPECT_EQ(g.calls[2].b, b.data());
  EXPECT_EQ(g.calls[1].stream, f.stream);
  EXPECT_EQ(g.calls[2].stream, f.stream);
  rq->wait();
  sq->wait();
}

// All-to-all-v: one group, a send and a recv per peer with a non-empty block, at the
// displacements given; empty blocks post nothing (both sides skip them).
TEST(NcclOrder, AllToAllVIsGroupedSendRecvAtTheDisplacements) {
  Fixture f(1, 3);
  std::vector<float> a(20), b(20);
  mc::View s{a.data(), 20, mc::DType::kFloat, MemKind::kDevice}, r{b.data(), 20, mc::DType::kFloat, MemKind::kDevice};
  const mc::PeerBlocks sb{{3, 0, 5}, {10, 0, 2}};         // to rank 2 from offset 2, nothing to rank 1 itself
  const mc::PeerBlocks rb = mc::PeerBlocks::packed({4, 0, 1});
  EXPECT_EQ(rb.displs, (std::vector<std::size_t>{0, 4, 4}));
  f.comm->all_to_allv(s, sb, r, rb);
  ASSERT_EQ(names(g.calls), (std::vector<std::string>{"groupStart", "send", "recv", "send", "recv", "groupEnd"}));
  const Call &s0 = g.calls[1], &r0 = g.calls[2], &s2 = g.calls[3], &r2 = g.calls[4];
  EXPECT_EQ(s0.peer, 0);
  EXPECT_EQ(s0.count, 3u);
  EXPECT_EQ(s0.a, at(a.data(), 10 * kF));
  EXPECT_EQ(r0.peer, 0);
  EXPECT_EQ(r0.count, 4u);
  EXPECT_EQ(r0.b, b.data());
  EXPECT_EQ(s2.peer, 2);
  EXPECT_EQ(s2.count, 5u);
  EXPECT_EQ(s2.a, at(a.data(), 2 * kF));
  EXPECT_EQ(r2.peer, 2);
  EXPECT_EQ(r2.count, 1u);
  EXPECT_EQ(r2.b, at(b.data(), 4 * kF));
  for (std::size_t i = 1; i < 5; ++i) EXPECT_EQ(g.calls[i].stream, f.stream);
  EXPECT_TRUE(f.comm->unsupported(mc::Collective::kAllToAllV, mc::DType::kFloat, std::nullopt, true, MemKind::kDevice));
  // A block past the end of the buffer is refused before anything is queued.
  g.clear();
  const mc::PeerBlocks past{{3, 0, 5}, {10, 0, 16}};
  EXPECT_THROW(f.comm->all_to_allv(s, past, r, rb), meshbench::core::UsageError);
  EXPECT_TRUE(g.calls.empty());
}

#if MB_TEST_RECORDING_COMM
// RecordingComm (the step engine's trace) records an all-to-all-v with bytes = everything the
// rank's blocks hold and wire_bytes = what it actually sends to other ranks.
TEST(NcclOrder, RecordingCommCountsTheBytesAnAllToAllVSends) {
  Fixture f(1, 3);
  meshbench::parallel::Trace trace;
  trace.on = true;
  meshbench::parallel::RecordingComm rec(std::move(f.comm), trace, "ep", 0);
  std::vector<float> a(20), b(20);
  mc::View s{a.data(), 20, mc::DType::kFloat, MemKind::kDevice}, r{b.data(), 20, mc::DType::kFloat, MemKind::kDevice};
  rec.all_to_allv(s, mc::PeerBlocks::packed({3, 7, 5}), r, mc::PeerBlocks::packed({4, 2, 1}));
  ASSERT_EQ(trace.comms.size(), 1u);
  const auto& e = trace.comms[0];
  EXPECT_EQ(e.kind, mc::Collective::kAllToAllV);
  EXPECT_EQ(e.dim, "ep");
  EXPECT_EQ(e.group_size, 3);
  EXPECT_EQ(e.bytes, (3u + 7u + 5u) * kF);
  EXPECT_DOUBLE_EQ(e.wire_bytes, static_cast<double>((3 + 5) * kF)) << "rank 1's own block is not sent";
  EXPECT_EQ(mc::name(e.kind), "all_to_allv");
}

// Issue 30, defect 5: a blocking collective on device memory returns once NCCL has queued it;
// RecordingComm waits for the communicator's stream before stamping the end, so the recorded
// busy time is the transfer's and not the enqueue's. With the trace off nothing waits.
TEST(NcclOrder, RecordingCommTimesADeviceCollectiveToItsEnd) {
  Fixture f(0, 2);
  meshbench::parallel::Trace trace;
  trace.on = true;
  const void* stream = f.stream;
  meshbench::parallel::RecordingComm rec(std::move(f.comm), trace, "tp", 0);
  std::vector<float> a(8);
  mc::View v{a.data(), 8, mc::DType::kFloat, MemKind::kDevice};
  g.clear();
  rec.all_reduce(v, v, mc::RedOp::kSum);
  const std::vector<std::string> got = names(g.calls);
  const auto ar = std::find(got.begin(), got.end(), "allReduce");
  ASSERT_NE(ar, got.end());
  bool waited = false;  // a synchronize of the NCCL stream after the all-reduce was queued
  for (size_t i = static_cast<size_t>(ar - got.begin()); i < g.calls.size(); ++i)
    waited = waited || (g.calls[i].fn == "streamSynchronize" && g.calls[i].stream == stream);
  EXPECT_TRUE(waited) << "the NCCL stream was not synchronized after the all-reduce was queued";
  trace.on = false;
  g.clear();
  rec.all_reduce(v, v, mc::RedOp::kSum);
  const std::vector<std::string> off = names(g.calls);
  EXPECT_EQ(std::count(off.begin(), off.end(), std::string("streamSynchronize")), 0)
      << "with the trace off a blocking call must not wait";
}
#endif

#if MB_TEST_RECORDING_COMM
// Issue 44, item 5: the tied embedding's all-reduce is ordered on both sides with the compute
// stream. Before: the producer's event; after: an event recorded on the NCCL stream behind the
// all-reduce that the compute stream waits on, so AdamW, the check's download and the next
// zero_grad (compute stream) and ZeRO's reduce-scatter (ordered after the compute stream) run
// after the sum. The host does not block.
TEST(NcclOrder, TiedEmbeddingReductionIsWaitedForByTheComputeStream) {
  Fixture f(1, 2);
  void* compute = reinterpret_cast<void*>(0xC0FFEE0);
  std::vector<float> grad(16);
  mc::View v{grad.data(), 16, mc::DType::kFloat, MemKind::kDevice};
  meshbench::parallel::all_reduce_in_order(*f.comm, v, compute);
  ASSERT_EQ(names(g.calls), (std::vector<std::string>{"eventRecord", "streamWaitEvent", "allReduce", "eventRecord",
                                                      "streamWaitEvent"}));
  EXPECT_EQ(g.calls[0].stream, compute);
  EXPECT_EQ(g.calls[1].stream, f.stream);
  EXPECT_EQ(g.calls[2].stream, f.stream);
  EXPECT_EQ(g.calls[3].stream, f.stream) << "the event behind the all-reduce is recorded on the NCCL stream";
  EXPECT_EQ(g.calls[4].stream, compute) << "the compute stream waits for it";
  EXPECT_EQ(g.calls[4].a, g.calls[3].a) << "the compute stream waits on another event";
}

// reduce_tied_embedding itself, on a model of the last stage (tied head: a "wte" gradient):
// its all-reduce is followed by a wait before anything else can read the gradient. A host
// model's consumer is the host, so the NCCL stream is synchronised.
TEST(NcclOrder, ReduceTiedEmbeddingWaitsForItsAllReduce) {
  Fixture f(1, 2);
  meshbench::parallel::GptConfig c;
  c.layers = 2;
  c.hidden = 8;
  c.heads = 2;
  c.kv_heads = 1;
  c.ffn = 16;
  c.seq = 4;
  c.max_seq = 4;
  c.vocab = 11;
  c.micro_batch = 1;
  c.tied = true;
  meshbench::parallel::GptOptions o;
  o.stage = meshbench::parallel::StageSpec{{{1, 2}}, false, true, 1};
  meshbench::parallel::Gpt<float> last(c, meshbench::parallel::cpu_backend<float>(), o);
  meshbench::parallel::PipeEnv pipe;
  pipe.embedding = f.comm.get();
  g.clear();
  meshbench::parallel::reduce_tied_embedding(last, pipe);
  const std::vector<std::string> got = names(g.calls);
  const auto ar = std::find(got.begin(), got.end(), "allReduce");
  ASSERT_NE(ar, got.end()) << "no all-reduce of the tied embedding";
  EXPECT_EQ(g.calls[size_t(ar - got.begin())].count, size_t(c.vocab) * size_t(c.hidden));
  ASSERT_NE(ar + 1, got.end()) << "nothing waits for the tied embedding's all-reduce";
  EXPECT_EQ(*(ar + 1), "streamSynchronize");
  EXPECT_EQ(g.calls[size_t(ar - got.begin()) + 1].stream, f.stream);
}
#endif

// order_after(producer): the producer's stream records an event, the NCCL stream waits on it,
// and only then is the collective queued.
TEST(NcclOrder, OrderAfterMakesTheNcclStreamWaitForTheProducer) {
  Fixture f(1, 2);
  void* producer = reinterpret_cast<void*>(0xC0FFEE0);
  std::vector<float> a(4);
  mc::View v{a.data(), 4, mc::DType::kFloat, MemKind::kDevice};
  f.comm->order_after(producer);
  auto req = f.comm->iall_reduce(v, v, mc::RedOp::kSum);
  req->wait();
  ASSERT_EQ(names(g.calls),
            (std::vector<std::string>{"eventRecord", "streamWaitEvent", "allReduce", "eventRecord", "eventSynchronize"}));
  EXPECT_EQ(g.calls[0].stream, producer);
  EXPECT_EQ(g.calls[1].stream, f.stream);
  EXPECT_EQ(g.calls[1].a, g.calls[0].a) << "the NCCL stream waits on another event than the producer recorded";
  EXPECT_EQ(g.calls[2].stream, f.stream);
  // The request's event is recorded on the NCCL stream behind the collective, and wait() waits on it.
  EXPECT_EQ(g.calls[3].stream, f.stream);
  EXPECT_EQ(g.calls[4].a, g.calls[3].a);
}

// Issue 44, item 7: --timing stream (the NCCL default) times n calls queued back to back on the
// communicator's stream between two events, after one barrier: no barrier, event or host wait
// between the calls, so neither launch latency nor barrier skew is counted; each sample is the
// interval / n. --timing graph captures the n calls once and launches the graph between the events.
TEST(NcclOrder, StreamTimingIsNBackToBackCallsBetweenTwoEvents) {
  Fixture f(1, 2);
  std::vector<float> a(8);
  mc::View v{a.data(), 8, mc::DType::kFloat, MemKind::kDevice};
  auto timer = f.comm->make_timer(2);
  g.clear();
  std::vector<double> out;
  EXPECT_EQ(mcol::time_back_to_back(*f.comm, *timer, 4, false, [&] { f.comm->all_reduce(v, v, mc::RedOp::kSum); }, out), 4);
  ASSERT_EQ(names(g.calls),
            (std::vector<std::string>{"streamSynchronize", "streamSynchronize", "commGetAsyncError", "mpiBarrier",
                                      "eventRecord", "allReduce", "allReduce", "allReduce", "allReduce", "eventRecord",
                                      "streamSynchronize"}));
  for (std::size_t i = 4; i < 11; ++i) EXPECT_EQ(g.calls[i].stream, f.stream) << g.calls[i].fn;
  ASSERT_EQ(out.size(), 4u);
  for (double t : out) EXPECT_DOUBLE_EQ(t, 8e-3 / 4) << "each sample is the interval over the calls";
}

TEST(NcclOrder, GraphTimingCapturesTheCallsOnceAndLaunchesThemBetweenTwoEvents) {
  Fixture f(0, 2);
  std::vector<float> a(8);
  mc::View v{a.data(), 8, mc::DType::kFloat, MemKind::kDevice};
  auto timer = f.comm->make_timer(2);
  g.clear();
  std::vector<double> out;
  mcol::time_back_to_back(*f.comm, *timer, 3, true, [&] { f.comm->all_reduce(v, v, mc::RedOp::kSum); }, out);
  ASSERT_EQ(names(g.calls),
            (std::vector<std::string>{"beginCapture", "allReduce", "allReduce", "allReduce", "endCapture",
                                      "graphInstantiate", "streamSynchronize", "streamSynchronize", "commGetAsyncError",
                                      "mpiBarrier", "eventRecord", "graphLaunch", "eventRecord", "streamSynchronize"}));
  EXPECT_EQ(g.calls[0].stream, f.stream) << "captured on the NCCL stream";
  EXPECT_EQ(g.calls[11].stream, f.stream) << "launched on the NCCL stream";
  EXPECT_EQ(g.calls[11].a, g.calls[5].b) << "the instantiated graph is the one launched";
  ASSERT_EQ(out.size(), 3u);
  EXPECT_DOUBLE_EQ(out[0], 8e-3 / 3);
}

// The collective driver's verified first call (collectives/runner.cpp): upload, barrier,
// call, completion, download. The upload has completed (its stream synchronised) before the
// collective is queued; the NCCL stream is synchronised before the download reads the result.
TEST(NcclOrder, UploadsCompleteBeforeTheCollectiveAndDownloadsWaitForIt) {
  Fixture f(1, 2);
  std::vector<float> dev(16), host(16, 1.0f);
  // Buffer::upload/download of device memory are these two calls (compute/buffer.cpp).
  meshbench::compute::copy_to_device(dev.data(), host.data(), 16 * kF);
  f.comm->barrier();
  mc::View v{dev.data(), 16, mc::DType::kFloat, MemKind::kDevice};
  f.comm->all_reduce(v, v, mc::RedOp::kSum);
  f.comm->synchronize();
  meshbench::compute::copy_to_host(host.data(), dev.data(), 16 * kF);
  ASSERT_EQ(names(g.calls),
            (std::vector<std::string>{"memcpyH2D", "streamSynchronize",                          // upload, done
                                      "streamSynchronize", "streamSynchronize", "commGetAsyncError",  // barrier
                                      "mpiBarrier", "allReduce",                                  // the call
                                      "streamSynchronize", "streamSynchronize", "commGetAsyncError",  // synchronize
                                      "memcpyD2H", "streamSynchronize"}));
  EXPECT_EQ(g.calls[1].stream, g.calls[0].stream) << "the upload's own stream is synchronised";
  EXPECT_EQ(g.calls[2].stream, cudaStreamLegacy) << "synchronize() drains the legacy stream";
  EXPECT_EQ(g.calls[3].stream, f.stream);
  EXPECT_EQ(g.calls[6].stream, f.stream);
  EXPECT_EQ(g.calls[8].stream, f.stream) << "the NCCL stream is drained before the download";
  EXPECT_EQ(g.calls[11].stream, g.calls[10].stream);
}

#if MB_TEST_RECORDING_COMM
// ---- issue 44, items 6 and 10: a device step without host waits, timed by events ----------

#include "device_step_fixture.hpp"

// Item 10 (b): a tensor-parallel group's request wait and blocking call on NCCL make the
// compute stream wait on an event behind the call; the host never blocks. (Before: the
// request's wait was cudaEventSynchronize and a blocking call synchronised the NCCL stream.)
TEST(NcclOrder, GroupWaitsAreStreamWaitsNotHostWaits) {
  Fixture f(0, 2);
  const void* nccl = f.stream;
  FakeDeviceBackend be;
  mp::CommGroup<float> group(*f.comm, be, nullptr);
  std::vector<float> x(8);
  g.clear();
  const int h = group.post_all_reduce(x.data(), 8);
  group.wait(h);
  group.all_reduce(x.data(), 8);
  group.all_gather(x.data(), x.data(), 4);
  EXPECT_EQ(host_syncs(g.calls), 0) << "a wait of the group blocked the host";
  // Each call: the compute stream's event waited on by NCCL, the call, then an event on the
  // NCCL stream that the compute stream waits on.
  int consumer_waits = 0;
  for (std::size_t i = 0; i < g.calls.size(); ++i) {
    const Call& c = g.calls[i];
    if (c.fn != "streamWaitEvent" || c.stream != be.stream()) continue;
    ++consumer_waits;
    ASSERT_GT(i, 0u);
    const auto rec = std::find_if(g.calls.rbegin() + std::ptrdiff_t(g.calls.size() - i), g.calls.rend(),
                                  [&](const Call& r) { return r.fn == "eventRecord" && r.a == c.a; });
    ASSERT_NE(rec, g.calls.rend()) << "the compute stream waits on an event never recorded";
    EXPECT_EQ(rec->stream, nccl) << "the event the compute stream waits on is not the NCCL stream's";
  }
  EXPECT_EQ(consumer_waits, 3);
  // A host consumer (null: the CPU backend) still blocks: the data is read on the host.
  auto req = f.comm->iall_reduce(mc::View{x.data(), 8, mc::DType::kFloat, MemKind::kDevice},
                                 mc::View{x.data(), 8, mc::DType::kFloat, MemKind::kDevice}, mc::RedOp::kSum);
  g.clear();
  req->wait_on(nullptr);
  EXPECT_EQ(names(g.calls), (std::vector<std::string>{"eventSynchronize"}));
}

// Item 10 (a, b, c): a data-parallel step (dp = 2, two micro-batches, every gradient bucket
// all-reduced on the fake NCCL) on a device backend makes one host synchronisation, its end,
// and reads the deferred loss after it: no upload, loss download, request wait or per-action
// synchronisation inside the step. (Before: 2 token uploads and a loss download per forward,
// an event synchronisation per bucket and a stream synchronisation after every action.)
TEST(NcclOrder, ADeviceStepSynchronisesTheHostOnceAtItsEnd) {
  Fixture f(0, 2);
  FakeDeviceBackend be;
  const mp::GptConfig c = tiny_config();
  mp::Gpt<float> model(c, be);
  model.init_weights(7);
  mp::Trace trace;
  trace.on = true;
  mp::RecordingComm dp(std::move(f.comm), trace, "dp", 0);
  mp::Plan plan;
  plan.model = c;
  plan.micro_batches = 2;
  plan.degrees.dp = 2;
  plan.bucket_mb = 0.0005;  // a few buckets
  mp::DataParallel<float> sync(model, dp, plan, &trace.tags);
  mp::StepEnv<float> env{model, &sync, trace, plan, mp::DataKind::kRandom, 1, 0, mp::AdamWConfig{}};
  const std::vector<mp::Action> actions = mp::accumulation_schedule(plan.micro_batches);
  g.clear();
  const double loss = mp::run_step(env, actions, 0, 0, 1);
  const std::vector<Call> calls = g.calls;
  int reductions = 0;
  for (const Call& k : calls) reductions += k.fn == "allReduce";
  EXPECT_GT(reductions, 1) << "the step reduced no gradient buckets";
  // The step's one wait (its end) and the loss read after it: both on the compute stream.
  std::vector<std::string> syncs;
  for (const Call& k : calls)
    if (k.fn == "streamSynchronize" || k.fn == "eventSynchronize" || k.fn == "deviceSynchronize") {
      syncs.push_back(k.fn);
      EXPECT_EQ(k.stream, be.stream()) << k.fn << " of another stream";
    }
  EXPECT_EQ(syncs, (std::vector<std::string>{"streamSynchronize", "streamSynchronize"}));
  const auto d2h = std::find_if(calls.begin(), calls.end(), [](const Call& k) { return k.fn == "memcpyD2H"; });
  ASSERT_NE(d2h, calls.end()) << "the deferred loss was not read";
  EXPECT_EQ(std::count_if(calls.begin(), calls.end(), [](const Call& k) { return k.fn == "memcpyD2H"; }), 1);
  EXPECT_EQ(std::count_if(calls.begin(), d2h, [](const Call& k) { return k.fn == "streamSynchronize"; }), 1)
      << "the loss is read after the step's end, its only other wait";
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 0.0) << "the deferred cross-entropy was not added to the step's loss";
  // The trace's times are the device marks': every op has its two marks.
  ASSERT_FALSE(trace.ops.empty());
  for (const auto& e : trace.ops) EXPECT_TRUE(e.mark_start >= 0 && e.mark_end > e.mark_start);
  ASSERT_FALSE(trace.comms.empty());
  for (const auto& e : trace.comms) {  // (the fake's requests test complete: none was waited on)
    EXPECT_TRUE(e.mark_start >= 0 && e.mark_end > e.mark_start);
    EXPECT_TRUE(e.t_start <= e.t_wait && e.t_wait <= e.t_end);
  }
  EXPECT_EQ(trace.step_start.size(), 1u);
}

// Item 6: a tensor-parallel all-reduce queued behind a long GEMM. The NCCL stream waits for the
// compute stream (order_after) before the call; the call's span starts with the mark recorded
// after that wait, so it is the transfer's 1 ms and not the GEMM's 10 ms. Event times are
// scripted: anchor 0, GEMM 0-10 ms, the NCCL stream reaches the call at 10 ms, ends at 11.
TEST(NcclOrder, ACollectiveBehindALongGemmIsNotChargedTheGemm) {
  Fixture f(0, 2);
  const void* nccl = f.stream;
  FakeDeviceBackend be;
  mp::Trace trace;
  trace.on = true;
  trace.clock = std::make_shared<meshbench::compute::DeviceClock>();
  mp::RecordingComm tp(std::move(f.comm), trace, "tp", 0);
  mp::CommGroup<float> group(tp, be, &trace.tags);
  std::vector<float> x(8);
  const mp::Trace::Sizes from = trace.sizes();
  g.clear();
  trace.clock->start(be.stream(), 100.0);  // host time 100 s at the anchor
  const int gemm0 = trace.mark(be.stream());
  const int gemm1 = trace.mark(be.stream());  // the GEMM is queued between these two
  group.all_reduce(x.data(), 8);
  // The events in the order they were recorded: anchor, GEMM start, GEMM end, order_after's,
  // the call's start (NCCL stream), the call's end (NCCL stream), order_before's.
  std::vector<const Call*> rec;
  for (const Call& k : g.calls)
    if (k.fn == "eventRecord") rec.push_back(&k);
  ASSERT_EQ(rec.size(), 7u);
  EXPECT_EQ(rec[4]->stream, nccl) << "the call's start is marked on the NCCL stream";
  EXPECT_EQ(rec[5]->stream, nccl);
  const std::vector<std::string> got = names(g.calls);
  const auto wait = std::find(got.begin(), got.end(), "streamWaitEvent");
  const auto start = std::find_if(g.calls.begin(), g.calls.end(), [&](const Call& k) { return &k == rec[4]; });
  ASSERT_LT(wait - got.begin(), start - g.calls.begin()) << "the start mark is recorded before the stream's wait";
  const float ms[] = {0, 0, 10, 0, 10, 11, 11};
  for (std::size_t i = 0; i < rec.size(); ++i) g.event_ms[rec[i]->a] = ms[i];
  trace.clock->resolve();
  trace.resolve_marks(from);
  EXPECT_NEAR(trace.clock->at(gemm1) - trace.clock->at(gemm0), 10e-3, 1e-9);
  ASSERT_EQ(trace.comms.size(), 1u);
  const mp::CommEvent& e = trace.comms[0];
  EXPECT_NEAR(e.t_start, 100.010, 1e-9) << "the call's span starts after its stream's wait";
  EXPECT_NEAR(e.t_end - e.t_start, 1e-3, 1e-9) << "the all-reduce is charged the GEMM";
  EXPECT_EQ(host_syncs(g.calls), 0);
}
#endif

}  // namespace
