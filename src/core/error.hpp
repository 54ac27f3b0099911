// Errors and check macros shared by every binary.
// Exit codes (docs/architecture.md): 0 ok, 1 a check failed, 2 bad usage, 3 runtime fault, 4 diverged.
// UsageError is thrown for anything the user can fix (exit 2); RuntimeFault for MPI/NCCL/CUDA
// failures (exit 3). Check macros name the statement, file, line, rank and host, in the
// manner of ggml's and PyTorch c10d's generated checks.
#pragma once

#include <stdexcept>
#include <string>

namespace meshbench::core {

// Exit codes of every binary (docs/architecture.md): ok, a check failed, bad usage or an impossible
// configuration, a runtime fault (MPI/NCCL/CUDA error, timeout, hang, signal, a results file
// that could not be written), and step_bench's training that diverged (a loss or gradient
// that is not finite).
enum class ExitCode : int { kOk = 0, kCheckFailed = 1, kUsage = 2, kRuntime = 3, kDiverged = 4 };
constexpr int code(ExitCode c) { return static_cast<int>(c); }

// A bad option or an impossible configuration. The message names the option and the rule.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An MPI/NCCL/CUDA failure or a timeout.
class RuntimeFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Results could not be written (a full disk, an I/O error) and every rank has agreed to stop
// (comm::agree_on_fault): the driver prints the message once and exits 3 without MPI_Abort,
// since no rank is left waiting in a collective.
class OutputFault : public RuntimeFault {
 public:
  using RuntimeFault::RuntimeFault;
};

// Set once by the driver after MPI_Init so fault messages can name the rank and host.
void set_fault_identity(int world_rank, std::string host);

// Print "meshbench: rank R (host): OP failed in GROUP: DETAIL" to stderr and end the whole
// job with exit code 3 (MPI_Abort when MPI is up, so no rank hangs).
// Before MPI_Abort: flush every stream and pause briefly. What a rank printed is in the pipe
// to the launcher's proxy, not yet on the user's terminal; MPICH's hydra kills its proxies on
// an abort, and a line the proxy had not forwarded was lost (4 of 40 runs of an allocation
// failure at 2 ranks ended with exit 3 and an empty stderr; 0 of 80 with the pause).
void drain_before_abort();

[[noreturn]] void fatal_runtime(const std::string& op, const std::string& group,
                                const std::string& detail);

// Called by the check macros; `group` is the communicator's name or "-".
[[noreturn]] void check_failed(const char* kind, const char* stmt, const std::string& detail,
                               const char* group, const char* file, int line);

}  // namespace meshbench::core

// One check pattern for every library the binaries call (ggml/c10d style): on failure print
// the statement, the library's error string, file, line, rank, host and group ("-" when
// there is none), then abort the job with exit 3. The CUDA and NCCL forms expand
// only in .cu files (their types appear nowhere else); each kind names its status type, its
// success value and its error-string function:
//   MB_CHECK_MPI(MPI_Allreduce(...), "tp")     MB_CHECK_CUDA(cudaMemcpyAsync(...), "-")
//   MB_CHECK_NCCL(ncclAllReduce(...), "dp")
//   kernel<<<grid, block, 0, stream>>>(...); MB_CHECK_LAUNCH(kernel, "-");
// (MB_CHECK_CUBLAS, the same pattern over the cuBLAS the backend opens at run time, is in
// parallel/kernels/cuda/cublas_api.cuh.)
// MB_CHECK_LAUNCH reads cudaGetLastError(), so a bad launch configuration is reported at the
// launch it came from, not at some later, unrelated call.
#define MB_CHECK_(kind, status_type, ok, to_string, text, stmt, group)                       \
  do {                                                                                     \
    const status_type mb_rc_ = (stmt);                                                     \
    if (mb_rc_ != (ok))                                                                    \
      ::meshbench::core::check_failed(kind, text, to_string(mb_rc_), (group), __FILE__,    \
                                      __LINE__);                                           \
  } while (0)
#define MB_CHECK_MPI(stmt, group) \
  MB_CHECK_("MPI", int, 0 /* MPI_SUCCESS */, ::meshbench::core::mpi_error_string, #stmt, stmt, group)
#define MB_CHECK_CUDA(stmt, group) \
  MB_CHECK_("CUDA", cudaError_t, cudaSuccess, cudaGetErrorString, #stmt, stmt, group)
#define MB_CHECK_NCCL(stmt, group) \
  MB_CHECK_("NCCL", ncclResult_t, ncclSuccess, ncclGetErrorString, #stmt, stmt, group)
#define MB_CHECK_LAUNCH(kernel, group) \
  MB_CHECK_("CUDA", cudaError_t, cudaSuccess, cudaGetErrorString, "launch of " #kernel, cudaGetLastError(), group)

namespace meshbench::core {
std::string mpi_error_string(int code);
}
