#include "comm/peer_board.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/core.h>
#include <fmt/format.h>

#include <fstream>
#include <map>
#include <mutex>
#include <new>

#include "comm/topology.hpp"

namespace meshbench::comm {
namespace {

struct Board {
  core::PeerState* slots = nullptr;  // [world]
  int world = 0, rank = 0;
  std::vector<int> same_host;        // [world]: 1 when on this host
  std::mutex mu;                     // the group registry
  std::map<std::string, std::vector<int>> groups;
};
Board& board() {
  static Board b;
  return b;
}

// 'T' (stopped), 't' (traced), 'Z', 'R', 'S', ... from /proc/PID/stat; 0 when unreadable.
char process_state(std::int64_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(f, line)) return 0;
  const std::size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : 0;
}

}  // namespace

void open_peer_board(MPI_Comm world) {
  Board& b = board();
  MPI_Comm_rank(world, &b.rank);
  MPI_Comm_size(world, &b.world);
  // The name: world rank 0's pid, and this host (ranks of one host share one board).
  long long key = b.rank == 0 ? static_cast<long long>(::getpid()) : 0;
  MPI_Bcast(&key, 1, MPI_LONG_LONG, 0, world);
  const std::string host = host_name();
  std::vector<char> hosts(static_cast<std::size_t>(b.world) * MPI_MAX_PROCESSOR_NAME, 0);
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, 0);
  host.copy(mine.data(), mine.size() - 1);
  MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, world);
  b.same_host.assign(static_cast<std::size_t>(b.world), 0);
  for (int r = 0; r < b.world; ++r)
    b.same_host[static_cast<std::size_t>(r)] = host == std::string(&hosts[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  std::string name = fmt::format("/meshbench-{}-{}", key, std::hash<std::string>{}(host) % 1000000007);
  const std::size_t bytes = sizeof(core::PeerState) * static_cast<std::size_t>(b.world);
  void* at = MAP_FAILED;
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd >= 0) {
    if (::ftruncate(fd, static_cast<off_t>(bytes)) == 0)  // the same size from every rank: zeros
      at = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
  }
  MPI_Barrier(world);  // every rank of the host has it open: the name can go
  if (fd >= 0) ::shm_unlink(name.c_str());
  if (at == MAP_FAILED) return;
  b.slots = static_cast<core::PeerState*>(at);  // zero-filled memory is a valid PeerState (all atomics 0)
  b.slots[b.rank].pid.store(::getpid(), std::memory_order_release);
  std::vector<int> ranks(static_cast<std::size_t>(b.world));
  for (int r = 0; r < b.world; ++r) ranks[static_cast<std::size_t>(r)] = r;
  std::lock_guard<std::mutex> lock(b.mu);
  b.groups["world"] = ranks;
}

core::PeerState* my_peer_state() {
  Board& b = board();
  return b.slots ? &b.slots[b.rank] : nullptr;
}

void register_group(const std::string& name, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return;
  int n = 0;
  MPI_Comm_size(comm, &n);
  MPI_Group g, w;
  MPI_Comm_group(comm, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &w);
  std::vector<int> local(static_cast<std::size_t>(n)), world(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) local[static_cast<std::size_t>(i)] = i;
  MPI_Group_translate_ranks(g, n, local.data(), w, world.data());
  MPI_Group_free(&g);
  MPI_Group_free(&w);
  Board& b = board();
  std::lock_guard<std::mutex> lock(b.mu);
  b.groups[name] = std::move(world);
}

Absent absent_members(const std::string& group, int me) {
  Absent a;
  Board& b = board();
  std::vector<int> members;
  {
    std::lock_guard<std::mutex> lock(b.mu);
    auto it = b.groups.find(group);
    if (it == b.groups.end() || !b.slots) return a;
    members = it->second;
  }
  a.known = true;
  std::vector<int> far;
  for (int r : members) {
    if (r == me || r < 0 || r >= b.world) continue;
    if (!b.same_host[static_cast<std::size_t>(r)]) {
      far.push_back(r);
      continue;
    }
    core::PeerCopy c;
    if (!core::read_peer(b.slots[r], c)) {
      a.ranks.push_back(r);
      a.detail.push_back(fmt::format("rank {}: no call state (it has not started, or has exited)", r));
      continue;
    }
    // A stopped or dead process holds the group up whether or not it reached the call.
    const char st = process_state(c.pid);
    const bool here = c.in_call && c.group == group;
    std::string how;
    if (st == 'T' || st == 't')
      how = fmt::format("STOPPED (SIGSTOP or a debugger), {} {} in group {}", here ? "in" : "last call", c.op, c.group);
    else if (st == 'Z' || st == 0)
      how = "exited";
    else if (here)
      continue;  // arrived: waiting in this group too
    else if (c.in_call)
      how = fmt::format("never arrived: waiting in {} in group {}", c.op, c.group);
    else
      how = fmt::format("never arrived: in no call, in {} (last call {} in {})", c.phase.empty() ? "?" : c.phase,
                        c.op.empty() ? "none" : c.op, c.group.empty() ? "-" : c.group);
    a.ranks.push_back(r);
    a.detail.push_back(fmt::format("rank {} (pid {}): {}", r, c.pid, how));
  }
  if (!far.empty())
    a.elsewhere = fmt::format("rank{} {} on other hosts: cannot tell from here", far.size() > 1 ? "s" : "",
                              fmt::join(far, ", "));
  return a;
}

}  // namespace meshbench::comm
