// The run's attention when --attention is not given (issue 44, item 9): on a GPU, the faster
// of flash and naive by the backend's own measurement, a short timing of both at set-up on the
// run's per-rank shape; elsewhere flash. The CUDA flash kernels (one thread per row, fp32, the
// row arrays in local memory) may well lose to naive's cuBLAS GEMMs at T <= 1024, and only a
// measurement on the device says by how much. The choice is a plain function (unit-tested on
// the CPU); the timing runs any backend's two attentions.
// Not here: the flag (step/options.cpp), where the choice is recorded (step/attributes.cpp).
#pragma once

#include <string>

#include "kernels/backend.hpp"

namespace meshbench::parallel {

// Seconds per forward + backward of one attention layer, the best of a few repetitions; NaN
// when not measured (a shape naive cannot hold, a backend without flash).
struct AttentionTimes {
  double flash_s, naive_s;
};

struct AttentionChoice {
  bool flash = true;
  std::string rule;  // why: "--attention" | "default on the host" | "measured: ..." | "not measured: ..."
};

// `given`: --attention as given ("flash" or "naive"), empty when not given; `measured`: whether
// the run measures (--device cuda without --attention). An explicit flag always wins; a
// measured tie goes to flash (less memory).
AttentionChoice choose_attention(const std::string& given, bool measured, const AttentionTimes& t);

// Times `reps` forwards and backwards of each attention on `be` at (B, T, NH, KVH, hs), after
// one untimed call of each: CUDA events on the backend's stream on a device (compute::
// DeviceClock), the host clock otherwise. Buffers are the backend's, released on return.
AttentionTimes time_attention(Backend<float>& be, int B, int T, int NH, int KVH, int hs, int reps = 3);

}  // namespace meshbench::parallel
