// The collective plug-ins' rules, checked against nccl-tests' definitions written out by
// hand: granularity, per-rank buffer layouts, bus-bandwidth factors, total bytes, and the
// expected results of each collective on a small world.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "options.hpp"
#include "spec.hpp"

using namespace meshbench::collectives;
using meshbench::comm::Collective;
using meshbench::comm::DType;
using meshbench::comm::RedOp;

namespace {
const Spec& spec(Collective c) { return *find_spec(c); }
}  // namespace

TEST(Spec, EveryCollectiveIsRegistered) {
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllToAll, Collective::kBroadcast, Collective::kSendRecv,
                       Collective::kAllToAllV}) {
    ASSERT_NE(find_spec(c), nullptr);
    EXPECT_EQ(find_spec(c)->kind, c);
  }
}

TEST(Spec, BusFactorsAreNcclTests) {  // comm::bus_factor: the suite's one definition
  for (int n : {1, 2, 4, 8}) {
    double ring = static_cast<double>(n - 1) / n;
    EXPECT_DOUBLE_EQ(meshbench::comm::bus_factor(Collective::kAllReduce, n), 2 * ring) << n;
    EXPECT_DOUBLE_EQ(meshbench::comm::bus_factor(Collective::kAllGather, n), ring) << n;
    EXPECT_DOUBLE_EQ(meshbench::comm::bus_factor(Collective::kReduceScatter, n), ring) << n;
    EXPECT_DOUBLE_EQ(meshbench::comm::bus_factor(Collective::kAllToAll, n), ring) << n;
    EXPECT_DOUBLE_EQ(meshbench::comm::bus_factor(Collective::kAllToAllV, n), ring) << n;
    EXPECT_DOUBLE_EQ(meshbench::comm::bus_factor(Collective::kBroadcast, n), 1.0) << n;
    EXPECT_DOUBLE_EQ(meshbench::comm::bus_factor(Collective::kSendRecv, n), 1.0) << n;
  }
  EXPECT_DOUBLE_EQ(meshbench::comm::bus_factor(Collective::kAllReduce, 8), 1.75);
}

TEST(Spec, GranularityAndLayouts) {
  // count = elements of the size column S; n = 4 ranks.
  const int n = 4;
  EXPECT_EQ(spec(Collective::kAllReduce).granularity(n), 1u);
  EXPECT_EQ(spec(Collective::kAllGather).granularity(n), 4u);
  EXPECT_EQ(spec(Collective::kReduceScatter).granularity(n), 4u);
  EXPECT_EQ(spec(Collective::kAllToAll).granularity(n), 4u);
  EXPECT_EQ(spec(Collective::kBroadcast).granularity(n), 1u);
  EXPECT_EQ(spec(Collective::kSendRecv).granularity(n), 1u);

  auto l = spec(Collective::kAllReduce).layout(100, n);
  EXPECT_EQ(l.send, 100u);
  EXPECT_EQ(l.recv, 100u);
  l = spec(Collective::kAllGather).layout(100, n);  // send a block, receive all blocks
  EXPECT_EQ(l.send, 25u);
  EXPECT_EQ(l.recv, 100u);
  l = spec(Collective::kReduceScatter).layout(100, n);  // send all blocks, receive one
  EXPECT_EQ(l.send, 100u);
  EXPECT_EQ(l.recv, 25u);
  l = spec(Collective::kAllToAll).layout(100, n);
  EXPECT_EQ(l.send, 100u);
  EXPECT_EQ(l.recv, 100u);
}

TEST(Spec, TotalBytesAreAllRanksInputs) {
  const int n = 4;
  const std::size_t elt = 4, count = 1024;
  EXPECT_EQ(spec(Collective::kAllReduce).total_bytes(count, elt, n), 4u * 4096u);
  EXPECT_EQ(spec(Collective::kAllGather).total_bytes(count, elt, n), 4096u);  // n blocks of S/n
  EXPECT_EQ(spec(Collective::kReduceScatter).total_bytes(count, elt, n), 4u * 4096u);
  EXPECT_EQ(spec(Collective::kAllToAll).total_bytes(count, elt, n), 4u * 4096u);
  EXPECT_EQ(spec(Collective::kBroadcast).total_bytes(count, elt, n), 4096u);  // the root's buffer
  EXPECT_EQ(spec(Collective::kSendRecv).total_bytes(count, elt, n), 4u * 4096u);
}

TEST(Spec, ExpectedResultsFollowTheDefinitions) {
  const int n = 4;
  Inputs in{DType::kInt32, RedOp::kSum, n, 2, spec(Collective::kAllReduce).layout(8, n)};
  // all-reduce: element j is the sum over ranks of element j.
  double sum = 0;
  for (int r = 0; r < n; ++r) sum += in.value(r, 5);
  EXPECT_EQ(spec(Collective::kAllReduce).expected(in, 3, 5), sum);

  // reduce-scatter: rank 2's element j is the reduction of element 2*block + j.
  in.layout = spec(Collective::kReduceScatter).layout(8, n);
  EXPECT_EQ(spec(Collective::kReduceScatter).expected(in, 2, 1), in.reduce(2 * 2 + 1));

  // all-gather: element j comes from rank j / block, element j % block.
  Inputs copy{DType::kFloat, std::nullopt, n, 2, spec(Collective::kAllGather).layout(8, n)};
  EXPECT_EQ(spec(Collective::kAllGather).expected(copy, 0, 5), copy.value(2, 1));

  // all-to-all: rank 1's block p is rank p's block 1.
  copy.layout = spec(Collective::kAllToAll).layout(8, n);
  EXPECT_EQ(spec(Collective::kAllToAll).expected(copy, 1, 6), copy.value(3, 1 * 2 + 0));

  // broadcast: the root's data; send/recv: the left neighbour's.
  copy.layout = spec(Collective::kBroadcast).layout(8, n);
  EXPECT_EQ(spec(Collective::kBroadcast).expected(copy, 3, 4), copy.value(2, 4));
  EXPECT_EQ(spec(Collective::kSendRecv).expected(copy, 0, 4), copy.value(3, 4));
  EXPECT_EQ(spec(Collective::kSendRecv).expected(copy, 2, 4), copy.value(1, 4));
}

TEST(Spec, InputsDependOnMemberWorldRanks) {
  // Two groups of a 4-rank world with the same group ranks get different inputs, so a
  // communicator holding the wrong members fails the check.
  std::vector<int> g0 = {0, 1}, g1 = {2, 3};
  Inputs a{DType::kFloat, RedOp::kSum, 2, 0, {16, 16}, &g0};
  Inputs b{DType::kFloat, RedOp::kSum, 2, 0, {16, 16}, &g1};
  int differ = 0;
  for (std::size_t i = 0; i < 16; ++i) differ += a.reduce(i) != b.reduce(i);
  EXPECT_GT(differ, 4);
}

// all-to-all-v: per-peer blocks packed in rank order, the bytes that leave a rank, and the
// balanced routing's matrix worked by hand (T = 3 tokens, k = 2, E = 4 on 2 ranks, hidden 2):
// rank 0's pairs go to experts 0 1 2 3 0 1 (ranks 0 0 1 1 0 0), rank 1's to 2 3 0 1 2 3.
TEST(Spec, AllToAllVBlocksAndBalancedMatrix) {
  using meshbench::comm::PeerBlocks;
  const PeerBlocks b = PeerBlocks::packed({3, 0, 5});
  EXPECT_EQ(b.displs, (std::vector<std::size_t>{0, 3, 3}));
  EXPECT_EQ(b.total(), 8u);
  EXPECT_EQ(meshbench::comm::sent_to_peers(b, 0), 5u);
  EXPECT_EQ(meshbench::comm::sent_to_peers(b, 1), 8u);
  meshbench::comm::View v{nullptr, 8, DType::kFloat};
  EXPECT_NO_THROW(meshbench::comm::check_blocks(b, v, 3, "send"));
  EXPECT_THROW(meshbench::comm::check_blocks(b, v, 2, "send"), meshbench::core::UsageError);
  v.count = 7;
  EXPECT_THROW(meshbench::comm::check_blocks(b, v, 3, "send"), meshbench::core::UsageError);

  const Spec& a2av = spec(Collective::kAllToAllV);
  Options o;
  o.top_k = 2;
  o.experts = 4;
  o.hidden = 2;
  ASSERT_EQ(a2av.unit(o), 4u);
  const PeerMatrix m = a2av.peers(o, 3 * 4, 2, 1);
  EXPECT_EQ(m.counts, (std::vector<std::vector<std::size_t>>{{8, 4}, {4, 8}}));
  EXPECT_EQ(m.send.counts, (std::vector<std::size_t>{4, 8}));
  EXPECT_EQ(m.recv.counts, (std::vector<std::size_t>{4, 8}));
  EXPECT_EQ(m.off_rank(), 8u);
  EXPECT_EQ(m.max_recv(), 12u);
  // Rank 1 receives rank 0's block for it (rank 0's elements 8..11), then its own block for
  // itself (its elements 4..11, after its 4 for rank 0).
  Inputs in{DType::kFloat, std::nullopt, 2, 0, {12, 12}, nullptr, &m};
  EXPECT_EQ(a2av.expected(in, 1, 0), in.value(0, 8));
  EXPECT_EQ(a2av.expected(in, 1, 3), in.value(0, 11));
  EXPECT_EQ(a2av.expected(in, 1, 4), in.value(1, 4));
  EXPECT_EQ(a2av.expected(in, 1, 11), in.value(1, 11));
  o.experts = 3;  // not a multiple of 2 ranks
  EXPECT_THROW(a2av.peers(o, 12, 2, 0), meshbench::core::UsageError);
}

// An empty block between two others: the element after it comes from the next rank.
TEST(Spec, AllToAllVExpectedSkipsEmptyBlocks) {
  PeerMatrix m;
  m.counts = {{0, 3, 2}, {0, 0, 0}, {1, 0, 4}};
  m.recv = meshbench::comm::PeerBlocks::packed({2, 0, 4});  // rank 2 receives 2 from 0, 4 from itself
  Inputs in{DType::kInt32, std::nullopt, 3, 0, {5, 6}, nullptr, &m};
  const Spec& a2av = spec(Collective::kAllToAllV);
  EXPECT_EQ(a2av.expected(in, 2, 0), in.value(0, 3));  // rank 0 keeps its block for 2 after its 3 for 1
  EXPECT_EQ(a2av.expected(in, 2, 1), in.value(0, 4));
  EXPECT_EQ(a2av.expected(in, 2, 2), in.value(2, 1));  // rank 2's own block starts after its 1 for rank 0
  EXPECT_EQ(a2av.expected(in, 2, 5), in.value(2, 4));
}
