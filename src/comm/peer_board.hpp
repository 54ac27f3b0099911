// The call state of every rank on this host, in shared memory (one core::PeerState per world
// rank, each written only by its owner through core::OpWatch), and the world ranks of every
// watched group by name. The hang watchdog of a rank whose call is stuck reads it to name the
// ranks of the group that never arrived (issue 45): on its host, a member that is in no call of
// that group is absent, and one whose process is stopped (SIGSTOP, a debugger) says so. Ranks on
// other hosts cannot be read from here; the report says so instead of guessing.
// Not here: the watchdog (core/op_watch.hpp) and the report (results/hang.hpp).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "core/op_watch.hpp"

namespace meshbench::comm {

// Collective over `world` (MPI_COMM_WORLD): maps this host's board, named after world rank 0's
// host and pid so only this job's ranks share it, and unlinks the name once every rank holds
// it, so nothing is left in /dev/shm however the job ends. Without shared memory the board is
// absent and reports say "cannot tell". Call once, after MPI_Init.
void open_peer_board(MPI_Comm world);

// This rank's state on the board (null before open_peer_board or without one).
core::PeerState* my_peer_state();

// `group`'s communicator: its world ranks, registered under its name (make_watched does).
void register_group(const std::string& name, MPI_Comm comm);

// For a call pending in `group` on world rank `me`: one phrase per member on this host that
// holds the group up: a stopped or exited process (in the call or not: "rank 1 (pid 4711):
// STOPPED (SIGSTOP or a debugger), in all_reduce in group tp#0"), or one that never arrived (in
// another call, or in none); the members on other hosts summed up in one phrase. `ranks` is
// empty when every member on this host is alive in the call (the hold-up is elsewhere).
struct Absent {
  std::vector<int> ranks;           // members on this host holding the group up
  std::vector<std::string> detail;  // one phrase per such rank
  std::string elsewhere;            // "ranks 2, 3 are on other hosts: cannot tell from here"
  bool known = false;               // the group's members and the board were there to read
};
Absent absent_members(const std::string& group, int me);

}  // namespace meshbench::comm
