#include "comm/agree.hpp"

namespace meshbench::comm {

namespace {

// The lowest rank's non-empty error on every rank ("" when no rank has one).
std::string first_error(MPI_Comm comm, const std::string& my_error) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int mine = my_error.empty() ? size : rank, first = size;
  MB_CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm), "world");
  if (first == size) return "";
  unsigned long long n = rank == first ? my_error.size() : 0;
  MB_CHECK_MPI(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, first, comm), "world");
  std::string msg = rank == first ? my_error : std::string(n, ' ');
  MB_CHECK_MPI(MPI_Bcast(msg.data(), static_cast<int>(n), MPI_CHAR, first, comm), "world");
  return msg;
}

}  // namespace

void agree_or_throw(MPI_Comm comm, const std::string& my_error) {
  if (std::string msg = first_error(comm, my_error); !msg.empty()) throw core::UsageError(msg);
}

void agree_on_fault(MPI_Comm comm, const std::string& my_error) {
  if (std::string msg = first_error(comm, my_error); !msg.empty()) throw core::OutputFault(msg);
}

}  // namespace meshbench::comm
