#include "spec.hpp"

namespace meshbench::collectives {

const std::vector<const Spec*>& all_specs() {
  static const std::vector<const Spec*> specs = {&all_reduce_spec(), &all_gather_spec(), &reduce_scatter_spec(),
                                                 &all_to_all_spec(), &broadcast_spec(),  &sendrecv_spec(),
                                                 &all_to_allv_spec()};
  return specs;
}

const Spec* find_spec(comm::Collective kind) {
  for (const Spec* s : all_specs())
    if (s->kind == kind) return s;
  return nullptr;
}

}  // namespace meshbench::collectives
