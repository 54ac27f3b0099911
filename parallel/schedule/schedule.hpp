// A step's schedule as data: the ordered list of actions one rank runs (DESIGN.md, "The
// parallel step"; STYLE.md, picotron's imperative loops done better). One executor
// (executor.hpp) runs any list; golden tests, timelines and the performance model read the
// same lists. Data parallel is the one generator here: m forwards and backwards in turn,
// then the gradient sync and the optimizer. The pipeline generators (GPipe, 1F1B,
// interleaved) add send/recv actions and chunks.
#pragma once

#include <string>
#include <vector>

namespace meshbench::parallel {

enum class ActionKind { kForward, kBackward, kGradSync, kOptimizer };

struct Action {
  ActionKind kind;
  int micro = 0;  // micro-batch index (forward, backward)
  int chunk = 0;  // model chunk (virtual stage); 0 without pipeline parallelism
};

// Gradient accumulation over m micro-batches: F0 B0 F1 B1 ... F(m-1) B(m-1) G O.
std::vector<Action> accumulation_schedule(int micro_batches);

std::string to_string(const std::vector<Action>& actions);  // "F0 B0 F1 B1 G O"

}  // namespace meshbench::parallel
