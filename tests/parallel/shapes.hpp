// Model shapes several engine tests share.
#pragma once

#include "config.hpp"

namespace meshbench::parallel::test {

// The tiny preset with grouped KV heads and an untied head: every code path of the model.
inline GptConfig gqa_untied() {
  GptConfig c = preset("tiny");
  c.kv_heads = 2;
  c.tied = false;
  return c;
}

}  // namespace meshbench::parallel::test
