// A collective plug-in: everything that differs between all-reduce, all-gather, ... and
// nothing else (nccl-tests' split). The shared driver (driver.cpp) owns the sweep, timing,
// verification and reporting. Counts are in elements; `count` is the element count of the
// size column S (see docs/results.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "comm/communicator.hpp"

namespace meshbench::collectives {

struct Options;  // options.hpp

// A collective whose blocks differ by rank (all-to-all-v): every member's per-peer element
// counts at one size, and this rank's blocks, packed in rank order.
struct PeerMatrix {
  std::vector<std::vector<std::size_t>> counts;  // [from][to], elements
  comm::PeerBlocks send, recv;                   // this rank's
  // Where `from` keeps its block for `to` in its send buffer.
  std::size_t send_displ(int from, int to) const;
  // Elements that cross between different ranks, summed over the group.
  std::uint64_t off_rank() const;
  // The largest receive buffer of any member, elements.
  std::size_t max_recv() const;
};

// Element counts of one rank's buffers for a size-column count.
struct Layout {
  std::size_t send = 0, recv = 0;
};

// The deterministic inputs of a check: every rank can compute every rank's input, so each
// rank derives its expected output without communication. Values are small integers, so
// every reduction order gives the same result in every dtype (nccl-tests' idea).
struct Inputs {
  comm::DType dtype = comm::DType::kFloat;
  std::optional<comm::RedOp> op;
  int ranks = 1;
  int root = 0;
  Layout layout;
  // World ranks of the group's members in communicator order: inputs depend on them, so a
  // communicator whose members differ from the computed group list fails the check.
  const std::vector<int>* members = nullptr;
  const PeerMatrix* peers = nullptr;  // all-to-all-v: the group's blocks at this size

  double value(int rank, std::size_t i) const;   // rank's send element i
  double reduce(std::size_t i) const;            // op over all ranks' element i
};

// The send and receive windows of one call.
struct Views {
  comm::View send, recv;
};

struct Spec {
  comm::Collective kind;
  bool reduces;   // takes -o/--op
  bool rooted;    // takes --root
  // The size column's element count is rounded down to a multiple of this.
  std::size_t (*granularity)(int ranks);
  Layout (*layout)(std::size_t count, int ranks);
  // Bytes all ranks' inputs hold together (the total_bytes column).
  std::uint64_t (*total_bytes)(std::size_t count, std::size_t elt, int ranks);
  // Expected value of element j of `rank`'s receive window.
  double (*expected)(const Inputs& in, int rank, std::size_t j);
  // In-place: the windows inside one buffer of `buffer_count` elements.
  Views (*inplace)(const comm::Communicator& c, comm::View buffer, Layout l);
  std::size_t (*inplace_buffer)(Layout l);
  void (*call)(comm::Communicator& c, const Views& v, const Inputs& in);
  // Collectives with per-rank blocks (all-to-all-v; null for the others). `unit`: elements
  // of S per unit of the size axis (a token: top-k x hidden), which `count` is a multiple
  // of; `peers`: the group's blocks for `count` elements of S per rank, from the options.
  std::size_t (*unit)(const Options& o) = nullptr;
  PeerMatrix (*peers)(const Options& o, std::size_t count, int ranks, int rank) = nullptr;
};

// The seven plug-ins (one file each: all_reduce.cpp, ...).
const Spec& all_reduce_spec();
const Spec& all_gather_spec();
const Spec& reduce_scatter_spec();
const Spec& all_to_all_spec();
const Spec& broadcast_spec();
const Spec& sendrecv_spec();
const Spec& all_to_allv_spec();
// Every plug-in, in comm::Collective's order (mesh_info --list-json names the binaries from it).
const std::vector<const Spec*>& all_specs();
const Spec* find_spec(comm::Collective kind);

// The driver: parses options, sweeps sizes, times, verifies, reports. Returns the exit code.
int run(const Spec& spec, int argc, char** argv);

}  // namespace meshbench::collectives
