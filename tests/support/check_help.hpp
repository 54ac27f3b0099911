// --help for the check programs ctest runs (mesh_comm_check, clock_sync_check, tp_layers_check):
// every program of the suite answers --help and -h with its usage, exit 0, starting nothing
// (docs/architecture.md). Called first in main(), before MPI_Init.
#pragma once

#include <cstdio>
#include <cstring>

namespace meshbench::tests {

// True (after printing `usage`) when the command line asks for help.
inline bool answered_help(int argc, char** argv, const char* usage) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(usage, stdout);
      return true;
    }
  return false;
}

}  // namespace meshbench::tests
