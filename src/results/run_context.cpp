#include "results/run_context.hpp"

#include <cblas.h>

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fmt/core.h>

#include "compute/device.hpp"
#include "core/error.hpp"
#include "mb_git_sha.h"  // generated at build time (cmake/git_sha.cmake): MB_GIT_SHA

extern char** environ;

extern "C" char* openblas_get_config(void);

namespace meshbench::results {
namespace {

std::string broadcast_string(std::string s, MPI_Comm comm) {
  unsigned long long n = s.size();
  MB_CHECK_MPI(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, comm), "world");
  s.resize(n);
  MB_CHECK_MPI(MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, 0, comm), "world");
  return s;
}

std::string mpi_library() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, static_cast<size_t>(len));
  auto nl = s.find('\n');
  return s.substr(0, nl);
}

}  // namespace

std::string utc_now_iso() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string suite_version() { return MB_VERSION; }
std::string git_sha() { return MB_GIT_SHA; }

nlohmann::ordered_json captured_env() {
  static constexpr std::array kPrefixes = {"MPICH_", "MPIR_CVAR_", "UCX_", "FI_", "NCCL_", "OMP_",
                                           "OPENBLAS_", "MESHBENCH_", "HYDRA_", "CUDA_VISIBLE_DEVICES"};
  nlohmann::ordered_json env = nlohmann::ordered_json::object();
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string key = kv.substr(0, eq);
    for (const char* p : kPrefixes)
      if (key.rfind(p, 0) == 0) env[key] = kv.substr(eq + 1);
  }
  return env;
}

RunContext make_run_context(MPI_Comm world, std::string_view binary, int argc, char** argv,
                            const comm::Topology& topology) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  RunContext ctx;
  ctx.topology = topology;
  std::string payload;
  if (rank == 0) {
    auto& a = ctx.attrs;
    std::string args;
    for (int i = 0; i < argc; ++i) {
      if (i) args += ' ';  // two appends: GCC 12 warns (-Wrestrict, falsely) on " " + string
      args += argv[i];
    }
    // The id: rank 0's start to the millisecond, the binary and rank 0's pid, so two runs
    // appending to one file never share an id (a second-resolution id made one overwrite
    // the other). "20261202T042212.345-step_bench-4711".
    const auto now = std::chrono::system_clock::now();
    const std::time_t secs = std::chrono::system_clock::to_time_t(now);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char stamp[32], iso[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
    std::strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const std::string start = iso;
    a["run_id"] = fmt::format("{}.{:03d}-{}-{}", stamp, static_cast<int>(ms), binary, static_cast<long>(::getpid()));
    a["binary"] = std::string(binary);
    a["argv"] = args;
    a["start_time"] = start;
    a["end_time"] = "";
    a["status"] = "running";
    a["tag"] = "";
    a["world_size"] = static_cast<int>(topology.ranks.size());
    a["nodes"] = topology.nodes;
    a["ranks_per_node"] = topology.max_ranks_per_node;
    a["cores_per_node"] = topology.cores_per_node;
    a["oversubscribed"] = topology.oversubscribed;
    a["nodes_emulated"] = topology.emulated;
    a["mpi_library"] = mpi_library();
    a["nccl_version"] = "none";
    a["cuda_version"] = compute::built_with_cuda() ? compute::cuda_version() : "none";
    const char* blas = openblas_get_config();
    a["blas"] = std::string("OpenBLAS ") + (blas ? blas : "");
    const char* job = std::getenv("SLURM_JOB_ID");
    a["slurm_job_id"] = job ? job : "";
    nlohmann::ordered_json slurm = nlohmann::ordered_json::object();
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      auto eq = kv.find('=');
      if (eq != std::string::npos && kv.rfind("SLURM_", 0) == 0) slurm[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    a["slurm"] = slurm;
    a["env"] = captured_env();
    a["order"] = "";
    a["mesh"] = nlohmann::ordered_json::object();
    payload = a.dump();
  }
  payload = broadcast_string(payload, world);
  ctx.attrs = nlohmann::ordered_json::parse(payload);
  ctx.run_id = ctx.attrs["run_id"].get<std::string>();
  return ctx;
}

void sync_from_root(RunContext& ctx, MPI_Comm world) {
  ctx.attrs = nlohmann::ordered_json::parse(broadcast_string(ctx.attrs.dump(), world));
  ctx.run_id = ctx.attrs["run_id"].get<std::string>();
}

}  // namespace meshbench::results
