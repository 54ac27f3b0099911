// all_to_allv_bench: the MoE token dispatch. Each of the n ranks holds T tokens (the size
// axis) and routes each to k distinct experts of E, spread E/n per rank, by a routing workload
// (--routing, core/routing.hpp); rank r sends every token-expert pair whose expert lives on
// rank p to p, a pair being --hidden elements. Blocks are packed in rank order on both sides.
// S = T*k*hidden elements: every rank's send buffer, the same on every rank (its own block
// included). algbw = S/t; busbw = W/t with W the bytes the group's ranks actually send to
// other ranks, divided by n (docs/collectives.md "all_to_allv_bench"). For balanced routing with E
// dividing T*k, W = S(n-1)/n and busbw is all_to_all_bench's.
#include <fmt/core.h>

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "options.hpp"
#include "spec.hpp"

namespace mc = meshbench::comm;
namespace meshbench::collectives {

std::size_t PeerMatrix::send_displ(int from, int to) const {
  const auto& row = counts[static_cast<std::size_t>(from)];
  return std::accumulate(row.begin(), row.begin() + to, std::size_t{0});
}

std::uint64_t PeerMatrix::off_rank() const {
  std::uint64_t sum = 0;
  for (std::size_t f = 0; f < counts.size(); ++f)
    for (std::size_t t = 0; t < counts[f].size(); ++t)
      if (f != t) sum += counts[f][t];
  return sum;
}

std::size_t PeerMatrix::max_recv() const {
  std::size_t most = 0;
  for (std::size_t t = 0; t < counts.size(); ++t) {
    std::size_t in = 0;
    for (const auto& row : counts) in += row[t];
    most = std::max(most, in);
  }
  return most;
}

namespace {

std::size_t token_elements(const Options& o) { return static_cast<std::size_t>(o.top_k) * o.hidden; }

PeerMatrix route(const Options& o, std::size_t count, int n, int rank) {
  if (o.experts % n != 0)
    throw core::UsageError(fmt::format("--experts {} must be a multiple of the {} ranks of the group (each rank "
                                       "holds E/n experts)",
                                       o.experts, n));
  PeerMatrix m;
  core::RoutingShape s;
  s.seed = o.seed;
  s.tokens = count / token_elements(o);
  s.experts = o.experts;
  s.top_k = o.top_k;
  s.ep = n;
  for (int r = 0; r < n; ++r) {
    s.rank = r;
    std::vector<std::size_t> pairs = core::pairs_per_ep_rank(core::assign_experts(o.routing, s), o.experts, n);
    for (auto& p : pairs) p *= o.hidden;
    m.counts.push_back(std::move(pairs));
  }
  const auto me = static_cast<std::size_t>(rank);
  m.send = mc::PeerBlocks::packed(m.counts[me]);
  std::vector<std::size_t> in(static_cast<std::size_t>(n));
  for (std::size_t p = 0; p < in.size(); ++p) in[p] = m.counts[p][me];
  m.recv = mc::PeerBlocks::packed(std::move(in));
  return m;
}

// Element j of `rank`'s receive buffer: from the rank p whose block holds j, at the same
// offset inside p's block for `rank`. The blocks are packed, so the last block starting at or
// before j holds it (an empty block starts where the next one does).
double expected(const Inputs& in, int rank, std::size_t j) {
  const PeerMatrix& m = *in.peers;
  const auto& d = m.recv.displs;
  const auto from = static_cast<int>(std::upper_bound(d.begin(), d.end(), j) - d.begin()) - 1;
  return in.value(from, m.send_displ(from, rank) + (j - d[static_cast<std::size_t>(from)]));
}

}  // namespace

const Spec& all_to_allv_spec() {
  static const Spec kSpec{
      .kind = mc::Collective::kAllToAllV,
      .reduces = false,
      .rooted = false,
      .granularity = [](int) -> std::size_t { return 1; },
      .layout = [](std::size_t count, int) { return Layout{count, count}; },  // balanced; the driver uses peers()
      .total_bytes = [](std::size_t count, std::size_t elt, int n) -> std::uint64_t { return count * elt * n; },
      .expected = expected,
      .inplace = [](const mc::Communicator&, mc::View buf, Layout) { return Views{buf, buf}; },
      .inplace_buffer = [](Layout l) { return l.recv; },
      .call =
          [](mc::Communicator& c, const Views& v, const Inputs& in) {
            c.all_to_allv(v.send, in.peers->send, v.recv, in.peers->recv);
          },
      .unit = token_elements,
      .peers = route,
  };
  return kSpec;
}

}  // namespace meshbench::collectives
