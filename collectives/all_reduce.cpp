// all_reduce_bench: every rank ends with the reduction of all ranks' buffers.
// S = count * element size; busbw = algbw * 2(n-1)/n (a ring moves each byte 2(n-1)/n times).
#include "spec.hpp"

namespace mc = meshbench::comm;
namespace meshbench::collectives {

const Spec& all_reduce_spec() {
  static const Spec kSpec{
      .kind = mc::Collective::kAllReduce,
      .reduces = true,
      .rooted = false,
      .granularity = [](int) -> std::size_t { return 1; },
      .layout = [](std::size_t count, int) { return Layout{count, count}; },
      .total_bytes = [](std::size_t count, std::size_t elt, int n) -> std::uint64_t { return count * elt * n; },
      .expected = [](const Inputs& in, int, std::size_t j) { return in.reduce(j); },
      .inplace = [](const mc::Communicator&, mc::View buf, Layout) { return Views{buf, buf}; },
      .inplace_buffer = [](Layout l) { return l.recv; },
      .call = [](mc::Communicator& c, const Views& v, const Inputs& in) { c.all_reduce(v.send, v.recv, *in.op); },
  };
  return kSpec;
}

}  // namespace meshbench::collectives
