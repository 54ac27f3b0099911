#include "spec.hpp"

namespace meshbench::collectives {

const Spec* find_spec(comm::Collective kind) {
  for (const Spec* s : {&all_reduce_spec(), &all_gather_spec(), &reduce_scatter_spec(), &all_to_all_spec(),
                        &broadcast_spec(), &sendrecv_spec()})
    if (s->kind == kind) return s;
  return nullptr;
}

}  // namespace meshbench::collectives
