// splitmix64's finaliser: the suite's one integer hash for deterministic data (the
// collectives' check inputs, the routing workloads' draws).
#pragma once

#include <cstdint>

namespace meshbench::core {

inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace meshbench::core
