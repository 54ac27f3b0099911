// broadcast_bench: every rank ends with the root's buffer. S = count * element size;
// busbw = algbw (factor 1). --root picks the root.
#include "spec.hpp"

namespace mc = meshbench::comm;
namespace meshbench::collectives {

const Spec& broadcast_spec() {
  static const Spec kSpec{
      .kind = mc::Collective::kBroadcast,
      .reduces = false,
      .rooted = true,
      .granularity = [](int) -> std::size_t { return 1; },
      .layout = [](std::size_t count, int) { return Layout{count, count}; },
      .total_bytes = [](std::size_t count, std::size_t elt, int) -> std::uint64_t { return count * elt; },
      .expected = [](const Inputs& in, int, std::size_t j) { return in.value(in.root, j); },
      .inplace = [](const mc::Communicator&, mc::View buf, Layout) { return Views{buf, buf}; },
      .inplace_buffer = [](Layout l) { return l.recv; },
      .call = [](mc::Communicator& c, const Views& v, const Inputs& in) { c.broadcast(v.send, v.recv, in.root); },
  };
  return kSpec;
}

}  // namespace meshbench::collectives
