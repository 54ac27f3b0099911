// sendrecv_bench: rank r sends its buffer to rank r+1 and receives from rank r-1 (mod n),
// all ranks at once: the traffic of a pipeline stage boundary. S = count * element size;
// busbw = algbw (factor 1). On one rank a rank exchanges with itself.
#include "spec.hpp"

namespace mc = meshbench::comm;
namespace meshbench::collectives {

const Spec& sendrecv_spec() {
  static const Spec kSpec{
      .kind = mc::Collective::kSendRecv,
      .reduces = false,
      .rooted = false,
      .granularity = [](int) -> std::size_t { return 1; },
      .layout = [](std::size_t count, int) { return Layout{count, count}; },
      .total_bytes = [](std::size_t count, std::size_t elt, int n) -> std::uint64_t { return count * elt * n; },
      .expected =
          [](const Inputs& in, int rank, std::size_t j) { return in.value((rank - 1 + in.ranks) % in.ranks, j); },
      .inplace = [](const mc::Communicator&, mc::View buf, Layout) { return Views{buf, buf}; },
      .inplace_buffer = [](Layout l) { return l.recv; },
      .call =
          [](mc::Communicator& c, const Views& v, const Inputs&) {
            int n = c.size(), r = c.rank();
            c.sendrecv(v.send, (r + 1) % n, v.recv, (r - 1 + n) % n);
          },
  };
  return kSpec;
}

}  // namespace meshbench::collectives
