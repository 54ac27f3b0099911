#include "comm/communicator.hpp"

#include <fmt/core.h>

#include <numeric>

#include "core/error.hpp"

namespace meshbench::comm {

std::string_view name(Backend b) { return b == Backend::kMpi ? "mpi" : "nccl"; }

std::string_view name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kSendRecv: return "sendrecv";
    case Collective::kAllToAllV: return "all_to_allv";
  }
  return "?";
}

double bus_factor(Collective c, int n) {
  const double f = n > 0 ? double(n - 1) / n : 0.0;
  switch (c) {
    case Collective::kAllReduce: return 2 * f;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
    case Collective::kAllToAllV: return f;
    case Collective::kBroadcast:
    case Collective::kSendRecv: return 1.0;
  }
  return 1.0;
}

std::size_t PeerBlocks::total() const { return std::accumulate(counts.begin(), counts.end(), std::size_t{0}); }

PeerBlocks PeerBlocks::packed(std::vector<std::size_t> counts) {
  PeerBlocks b;
  b.displs.resize(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), b.displs.begin(), std::size_t{0});
  b.counts = std::move(counts);
  return b;
}

std::size_t sent_to_peers(const PeerBlocks& send, int rank) {
  return send.total() - send.counts.at(static_cast<std::size_t>(rank));
}

void check_blocks(const PeerBlocks& b, const View& v, int ranks, const char* side) {
  const auto n = static_cast<std::size_t>(ranks);
  if (b.counts.size() != n || b.displs.size() != n)
    throw core::UsageError(fmt::format("all_to_allv: {} blocks give {} counts and {} displacements for a group of {} ranks",
                                       side, b.counts.size(), b.displs.size(), ranks));
  for (std::size_t p = 0; p < n; ++p)
    if (b.displs[p] + b.counts[p] > v.count)
      throw core::UsageError(fmt::format("all_to_allv: {} block {} ({} elements at {}) ends past the buffer of {} elements",
                                         side, p, b.counts[p], b.displs[p], v.count));
}

}  // namespace meshbench::comm
