// Element types, reduction ops and typed views: the vocabulary every backend speaks.
// A View carries its element type, count and memory kind, so a collective call derives
// counts from its buffers instead of taking (void*, count, dtype) triples.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "compute/device.hpp"

namespace meshbench::comm {

enum class DType { kFloat, kDouble, kInt32, kInt8, kBf16, kHalf };
enum class RedOp { kSum, kProd, kMin, kMax, kAvg };

// The element type of a float or double buffer (the step engine's scalar S).
template <typename S>
constexpr DType dtype_of() {
  static_assert(std::is_same_v<S, float> || std::is_same_v<S, double>, "dtype_of: float or double");
  return std::is_same_v<S, float> ? DType::kFloat : DType::kDouble;
}

inline constexpr std::array kAllDTypes = {DType::kFloat, DType::kDouble, DType::kInt32,
                                          DType::kInt8,  DType::kBf16,   DType::kHalf};
inline constexpr std::array kAllRedOps = {RedOp::kSum, RedOp::kProd, RedOp::kMin, RedOp::kMax,
                                          RedOp::kAvg};

std::string_view name(DType t);
std::string_view name(RedOp op);
std::optional<DType> parse_dtype(std::string_view s);
std::optional<RedOp> parse_redop(std::string_view s);
std::size_t size_of(DType t);
bool is_integer(DType t);

// A typed window on a buffer (host or device memory).
struct View {
  void* data = nullptr;
  std::size_t count = 0;  // elements
  DType dtype = DType::kFloat;
  compute::MemKind mem = compute::MemKind::kHost;

  std::size_t bytes() const { return count * size_of(dtype); }
  View slice(std::size_t first, std::size_t n) const {
    return {static_cast<std::byte*>(data) + first * size_of(dtype), n, dtype, mem};
  }
};

}  // namespace meshbench::comm
