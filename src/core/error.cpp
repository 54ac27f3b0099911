#include "core/error.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace meshbench::core {
namespace {
int g_rank = -1;
constexpr int kAbortDrainMs = 200;
std::string g_host = "?";
}  // namespace

void set_fault_identity(int world_rank, std::string host) {
  g_rank = world_rank;
  g_host = std::move(host);
}

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

void drain_before_abort() {
  std::fflush(nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(kAbortDrainMs));
}

void fatal_runtime(const std::string& op, const std::string& group, const std::string& detail) {
  std::fprintf(stderr, "meshbench: rank %d (%s): %s failed in group %s: %s\n", g_rank,
               g_host.c_str(), op.c_str(), group.c_str(), detail.c_str());
  std::fflush(stderr);
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) {
    drain_before_abort();
    MPI_Abort(MPI_COMM_WORLD, static_cast<int>(ExitCode::kRuntime));
  }
  std::_Exit(static_cast<int>(ExitCode::kRuntime));
}

void check_failed(const char* kind, const char* stmt, const std::string& detail,
                  const char* group, const char* file, int line) {
  std::string op = std::string(kind) + " call `" + stmt + "` (" + file + ":" + std::to_string(line) + ")";
  fatal_runtime(op, group ? group : "-", detail);
}

}  // namespace meshbench::core
