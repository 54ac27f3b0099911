// NCCL entry points when meshbench is built without NCCL: a clear refusal (exit 2).
#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace meshbench::comm {

bool built_with_nccl() { return false; }
std::string nccl_version() { return "none"; }

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, std::string, int) {
  throw core::UsageError(
      "--backend nccl: this meshbench was built without NCCL (configure found no nvcc or no "
      "nccl.h/libnccl; set NCCL_ROOT or use --backend mpi)");
}

}  // namespace meshbench::comm
