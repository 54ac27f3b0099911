// Provenance of one run: the /runs/<run_id> attributes of docs/architecture.md. Built on rank 0
// (time, environment, MPI library, Slurm variables) and broadcast, so every rank holds the
// same values, as parallel HDF5 requires for metadata.
#pragma once

#include <mpi.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "comm/topology.hpp"

namespace meshbench::results {

inline constexpr int kSchemaVersion = 1;

struct RunContext {
  std::string run_id;                // "<UTC time to the ms>-<binary>-<rank 0's pid>"
  nlohmann::ordered_json attrs;      // written as /runs/<run_id> attributes
  comm::Topology topology;
};

std::string utc_now_iso();           // 2026-11-29T15:01:02Z
std::string suite_version();         // "0.1.0"
std::string git_sha();

// Rank 0's environment: variables with the prefixes that change how MPI, UCX, NCCL, OpenMP
// and OpenBLAS behave, and meshbench's own.
nlohmann::ordered_json captured_env();

// Collective over `world`. `binary` is the program name without its path.
RunContext make_run_context(MPI_Comm world, std::string_view binary, int argc, char** argv,
                            const comm::Topology& topology);

// Replace every rank's attrs with rank 0's (after the driver has added its settings).
void sync_from_root(RunContext& ctx, MPI_Comm world);

}  // namespace meshbench::results
