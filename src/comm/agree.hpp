// Agreement on errors across ranks: every rank learns whether any rank found a problem and
// gets the lowest such rank's message, so all ranks throw the same core::UsageError and
// exit 2 together instead of leaving the others waiting in a collective.
#pragma once

#include <mpi.h>

#include <string>

namespace meshbench::comm {

// Collective over `comm`. `my_error` empty means "fine on this rank".
void agree_or_throw(MPI_Comm comm, const std::string& my_error);

// The same for a fault found on some ranks (a results file that could not be written on
// rank 0): every rank throws core::OutputFault with the lowest such rank's message.
void agree_on_fault(MPI_Comm comm, const std::string& my_error);

// Runs `f` on every rank; a core::UsageError thrown on any rank is re-thrown on all.
template <typename F>
void agreed(MPI_Comm comm, F&& f);

}  // namespace meshbench::comm

#include "core/error.hpp"

template <typename F>
void meshbench::comm::agreed(MPI_Comm comm, F&& f) {
  std::string err;
  try {
    f();
  } catch (const core::UsageError& e) {
    err = e.what();
  }
  agree_or_throw(comm, err);
}
