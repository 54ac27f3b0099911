// Model shapes several engine tests share.
#pragma once

#include "common/config.hpp"

namespace meshbench::parallel::test {

// The tiny preset with grouped KV heads and an untied head: every code path of the model.
inline GptConfig gqa_untied() {
  GptConfig c = preset("tiny");
  c.kv_heads = 2;
  c.tied = false;
  return c;
}

// The tiny preset with 4 experts, top-2 in every block and capacity factor 1 (issue 13): the
// router, the capacity drops and the expert GEMMs on uneven row counts.
inline GptConfig moe_tiny() {
  GptConfig c = preset("tiny");
  c.experts = 4;
  c.top_k = 2;
  c.capacity_factor = 1.0;
  return c;
}

}  // namespace meshbench::parallel::test
