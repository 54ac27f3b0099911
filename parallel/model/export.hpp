// Exports one training step of the float32 engine for an outside oracle
// (scripts/torch_reference.py): the configuration and layout table as JSON, and raw
// little-endian arrays: tokens/targets (int32, B*T), params_before, grads, params_after
// (float32, the whole flat layout with padding), logits (float32, B*T*V).
// Not here: any comparison; the oracle decides.
#pragma once

#include <string>

#include "model/model.hpp"

namespace meshbench::parallel {

struct ExportedStep {
  std::vector<int32_t> tokens, targets;
  std::vector<float> params_before, logits, grads, params_after;
  float loss = 0;
};

// Runs forward, backward and AdamW step 1 on `model` (which must hold initial weights and
// zero moments) and returns everything the oracle compares.
ExportedStep run_export_step(Gpt<float>& model, const int32_t* tokens, const int32_t* targets,
                             const AdamWConfig& adam);

// Writes dir/config.json and the .bin files; creates dir. Throws std::runtime_error on I/O.
void write_export(const std::string& dir, const Gpt<float>& model, const ExportedStep& step,
                  const AdamWConfig& adam);

}  // namespace meshbench::parallel
