// all_to_all_bench: rank r sends block p of its buffer to rank p and receives rank p's
// block r into its block p (the MoE token exchange). S = the whole buffer of n blocks;
// busbw = algbw * (n-1)/n.
#include "spec.hpp"

namespace mc = meshbench::comm;
namespace meshbench::collectives {

const Spec& all_to_all_spec() {
  static const Spec kSpec{
      .kind = mc::Collective::kAllToAll,
      .reduces = false,
      .rooted = false,
      .granularity = [](int n) -> std::size_t { return static_cast<std::size_t>(n); },
      .layout = [](std::size_t count, int) { return Layout{count, count}; },
      .total_bytes = [](std::size_t count, std::size_t elt, int n) -> std::uint64_t { return count * elt * n; },
      .expected =
          [](const Inputs& in, int rank, std::size_t j) {
            std::size_t block = in.layout.recv / static_cast<std::size_t>(in.ranks);
            return in.value(static_cast<int>(j / block), static_cast<std::size_t>(rank) * block + j % block);
          },
      .inplace = [](const mc::Communicator&, mc::View buf, Layout) { return Views{buf, buf}; },
      .inplace_buffer = [](Layout l) { return l.recv; },
      .call = [](mc::Communicator& c, const Views& v, const Inputs&) { c.all_to_all(v.send, v.recv); },
  };
  return kSpec;
}

}  // namespace meshbench::collectives
