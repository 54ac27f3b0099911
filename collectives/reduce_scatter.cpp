// reduce_scatter_bench: rank r ends with block r of the reduction of all ranks' buffers.
// S = the full input buffer (n blocks); busbw = algbw * (n-1)/n. Where the in-place result
// lands is the backend's convention (MPI_IN_PLACE: the front; NCCL: the rank's block).
#include "spec.hpp"

namespace mc = meshbench::comm;
namespace meshbench::collectives {

const Spec& reduce_scatter_spec() {
  static const Spec kSpec{
      .kind = mc::Collective::kReduceScatter,
      .reduces = true,
      .rooted = false,
      .granularity = [](int n) -> std::size_t { return static_cast<std::size_t>(n); },
      .layout = [](std::size_t count, int n) { return Layout{count, count / static_cast<std::size_t>(n)}; },
      .total_bytes = [](std::size_t count, std::size_t elt, int n) -> std::uint64_t { return count * elt * n; },
      .expected =
          [](const Inputs& in, int rank, std::size_t j) {
            return in.reduce(static_cast<std::size_t>(rank) * in.layout.recv + j);
          },
      .inplace =
          [](const mc::Communicator& c, mc::View buf, Layout l) {
            return Views{buf, buf.slice(c.reduce_scatter_inplace_offset(l.recv), l.recv)};
          },
      .inplace_buffer = [](Layout l) { return l.send; },
      .call = [](mc::Communicator& c, const Views& v, const Inputs& in) { c.reduce_scatter(v.send, v.recv, *in.op); },
  };
  return kSpec;
}

}  // namespace meshbench::collectives
