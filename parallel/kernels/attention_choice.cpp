#include "kernels/attention_choice.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>

#include <fmt/core.h>

#include "compute/device.hpp"
#include "core/timer.hpp"

namespace meshbench::parallel {

AttentionChoice choose_attention(const std::string& given, bool measured, const AttentionTimes& t) {
  if (!given.empty()) return {given == "flash", "--attention " + given};
  if (!measured) return {true, "default on the host (flash)"};
  const bool f = std::isfinite(t.flash_s), n = std::isfinite(t.naive_s);
  if (!f && !n) return {true, "not measured: flash (the default)"};
  if (!n) return {true, fmt::format("measured: flash {:.3f} ms, naive not measurable", t.flash_s * 1e3)};
  if (!f) return {false, fmt::format("measured: naive {:.3f} ms, flash not measurable", t.naive_s * 1e3)};
  const bool flash = t.flash_s <= t.naive_s;
  return {flash, fmt::format("measured: the faster of flash {:.3f} ms and naive {:.3f} ms per layer forward + backward",
                             t.flash_s * 1e3, t.naive_s * 1e3)};
}

namespace {

// The best of `reps` timed runs of `work`, after one untimed run.
double best_of(Backend<float>& be, int reps, const std::function<void()>& work) {
  work();
  be.synchronize();
  void* stream = be.stream();
  double best = std::numeric_limits<double>::infinity();
  if (stream == nullptr) {
    for (int r = 0; r < reps; ++r) {
      const double t0 = core::now_seconds();
      work();
      best = std::min(best, core::now_seconds() - t0);
    }
    return best;
  }
  compute::DeviceClock clock;
  clock.start(stream, 0.0);
  std::vector<int> marks;
  for (int r = 0; r < reps; ++r) {
    marks.push_back(clock.mark(stream));
    work();
    marks.push_back(clock.mark(stream));
  }
  be.synchronize();
  clock.resolve();
  for (int r = 0; r < reps; ++r) best = std::min(best, clock.at(marks[2 * r + 1]) - clock.at(marks[2 * r]));
  return best;
}

}  // namespace

AttentionTimes time_attention(Backend<float>& be, int B, int T, int NH, int KVH, int hs, int reps) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  AttentionTimes out{nan, nan};
  const int64_t rows = int64_t{B} * T, qkv = rows * (NH + 2 * KVH) * hs, o = rows * NH * hs;
  BackendArray<float, float> x(be, qkv), dx(be, qkv), y(be, o), dy(be, o), lse(be, int64_t{B} * NH * T);
  be.zero(x.data(), x.bytes());
  be.zero(dy.data(), dy.bytes());
  if (be.flash_attention()) try {  // a head size past the kernel's accumulators refuses
      out.flash_s = best_of(be, reps, [&] {
        be.flash_attention_forward(y.data(), lse.data(), x.data(), B, T, NH, KVH, hs);
        be.flash_attention_backward(dx.data(), dy.data(), x.data(), y.data(), lse.data(), B, T, NH, KVH, hs);
      });
    } catch (const std::invalid_argument&) {
      out.flash_s = nan;
    }
  try {  // naive holds (B, NH, T, T) probabilities and their gradient
    const int64_t att = int64_t{B} * NH * T * T;
    BackendArray<float, float> a(be, att), da(be, att);
    out.naive_s = best_of(be, reps, [&] {
      be.attention_forward(y.data(), a.data(), x.data(), B, T, NH, KVH, hs);
      be.attention_backward(dx.data(), da.data(), dy.data(), x.data(), a.data(), B, T, NH, KVH, hs);
    });
  } catch (const std::exception&) {  // out of memory: naive is not an option here
    out.naive_s = nan;
  }
  return out;
}

}  // namespace meshbench::parallel
