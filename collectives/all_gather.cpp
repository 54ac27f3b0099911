// all_gather_bench: every rank ends with all ranks' blocks, in rank order.
// S = the gathered buffer (n blocks); busbw = algbw * (n-1)/n. In place, a rank's block
// already sits at its slot of the receive buffer (MPI_IN_PLACE and NCCL agree).
#include "spec.hpp"

namespace mc = meshbench::comm;
namespace meshbench::collectives {

const Spec& all_gather_spec() {
  static const Spec kSpec{
      .kind = mc::Collective::kAllGather,
      .reduces = false,
      .rooted = false,
      .granularity = [](int n) -> std::size_t { return static_cast<std::size_t>(n); },
      .layout = [](std::size_t count, int n) { return Layout{count / static_cast<std::size_t>(n), count}; },
      .total_bytes = [](std::size_t count, std::size_t elt, int) -> std::uint64_t { return count * elt; },
      .expected =
          [](const Inputs& in, int, std::size_t j) {
            std::size_t block = in.layout.send;
            return in.value(static_cast<int>(j / block), j % block);
          },
      .inplace =
          [](const mc::Communicator& c, mc::View buf, Layout l) {
            return Views{buf.slice(static_cast<std::size_t>(c.rank()) * l.send, l.send), buf};
          },
      .inplace_buffer = [](Layout l) { return l.recv; },
      .call = [](mc::Communicator& c, const Views& v, const Inputs&) { c.all_gather(v.send, v.recv); },
  };
  return kSpec;
}

}  // namespace meshbench::collectives
