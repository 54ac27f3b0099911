#include "comm/communicator.hpp"

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
  }
  return "?";
}

}  // namespace meshbench::comm
