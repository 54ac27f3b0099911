#include "data.hpp"

#include <bit>
#include <cmath>
#include <cstring>

#include "core/hash.hpp"

namespace meshbench::collectives {
namespace {

using comm::DType;
using comm::RedOp;

std::uint16_t to_half(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  int exp = static_cast<int>((x >> 23) & 0xFF) - 127 + 15;
  std::uint32_t mant = x & 0x7FFFFFu;
  if (((x >> 23) & 0xFF) == 0xFF) return static_cast<std::uint16_t>(sign | 0x7C00u | (mant ? 0x200u : 0));
  if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000u;
    std::uint32_t shift = static_cast<std::uint32_t>(14 - exp);
    std::uint32_t half = mant >> shift;
    std::uint32_t rem = mant & ((1u << shift) - 1);
    std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = sign | (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
  std::uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
  return static_cast<std::uint16_t>(half);
}

float from_half(std::uint16_t h) {
  std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1F;
  std::uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

std::uint16_t to_bf16(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

float from_bf16(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

// Wrap an integer-valued double to the low bits, as integer hardware arithmetic does.
std::int64_t wrap(double v) { return static_cast<std::int64_t>(std::llround(v)); }

double tolerance(DType t, std::optional<RedOp> op, int ranks, double expected) {
  bool avg = op && *op == RedOp::kAvg;
  if (comm::is_integer(t)) return avg ? 1.0 : 0.0;  // integer avg truncates
  double eps = t == DType::kDouble ? 1e-12 : t == DType::kFloat ? 1e-6 : t == DType::kHalf ? 1e-3 : 8e-3;
  bool wide_sum = (t == DType::kHalf || t == DType::kBf16) && ranks > 64;
  if (!avg && !wide_sum) return 0.0;
  return eps * std::max(1.0, std::fabs(expected)) * (wide_sum ? ranks : 4);
}

}  // namespace

double Inputs::value(int rank, std::size_t i) const {
  int who = members ? (*members)[static_cast<std::size_t>(rank)] : rank;
  std::uint64_t h = core::mix64((static_cast<std::uint64_t>(who) << 40) ^ i);
  if (!op) return static_cast<double>(static_cast<int>(h % 64) - 32);  // copies: [-32, 31]
  if (*op == RedOp::kProd) {
    // One rank contributes 2 and one -1, the rest 1: the product is exactly +-2.
    int n = ranks;
    if (static_cast<int>(i % static_cast<std::size_t>(n)) == rank) return 2.0;
    if (n > 1 && static_cast<int>((i + 1) % static_cast<std::size_t>(n)) == rank) return -1.0;
    return 1.0;
  }
  bool narrow = (dtype == DType::kHalf || dtype == DType::kBf16) && ranks > 64;
  return narrow ? static_cast<double>(h % 2) : static_cast<double>(static_cast<int>(h % 4) - 1);  // [-1, 2]
}

double Inputs::reduce(std::size_t i) const {
  double acc = value(0, i);
  for (int r = 1; r < ranks; ++r) {
    double v = value(r, i);
    switch (*op) {
      case RedOp::kSum:
      case RedOp::kAvg: acc += v; break;
      case RedOp::kProd: acc *= v; break;
      case RedOp::kMin: acc = std::min(acc, v); break;
      case RedOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (*op == RedOp::kAvg) acc = comm::is_integer(dtype) ? std::trunc(acc / ranks) : acc / ranks;
  return acc;
}

void encode(DType t, double v, void* dst) {
  switch (t) {
    case DType::kFloat: {
      float f = static_cast<float>(v);
      std::memcpy(dst, &f, 4);
      break;
    }
    case DType::kDouble: std::memcpy(dst, &v, 8); break;
    case DType::kInt32: {
      auto x = static_cast<std::uint32_t>(wrap(v));
      std::memcpy(dst, &x, 4);
      break;
    }
    case DType::kInt8: {
      auto x = static_cast<std::uint8_t>(wrap(v));
      std::memcpy(dst, &x, 1);
      break;
    }
    case DType::kBf16: {
      std::uint16_t x = to_bf16(static_cast<float>(v));
      std::memcpy(dst, &x, 2);
      break;
    }
    case DType::kHalf: {
      std::uint16_t x = to_half(static_cast<float>(v));
      std::memcpy(dst, &x, 2);
      break;
    }
  }
}

double decode(DType t, const void* src) {
  switch (t) {
    case DType::kFloat: {
      float f;
      std::memcpy(&f, src, 4);
      return f;
    }
    case DType::kDouble: {
      double d;
      std::memcpy(&d, src, 8);
      return d;
    }
    case DType::kInt32: {
      std::int32_t x;
      std::memcpy(&x, src, 4);
      return x;
    }
    case DType::kInt8: {
      std::int8_t x;
      std::memcpy(&x, src, 1);
      return x;
    }
    case DType::kBf16: {
      std::uint16_t x;
      std::memcpy(&x, src, 2);
      return from_bf16(x);
    }
    case DType::kHalf: {
      std::uint16_t x;
      std::memcpy(&x, src, 2);
      return from_half(x);
    }
  }
  return 0;
}

void fill_inputs(const Inputs& in, int rank, std::byte* dst, std::size_t first, std::size_t count) {
  std::size_t elt = comm::size_of(in.dtype);
  for (std::size_t i = 0; i < count; ++i) encode(in.dtype, in.value(rank, first + i), dst + i * elt);
}

void fill_sentinel(DType t, std::byte* dst, std::size_t count) {
  std::size_t elt = comm::size_of(t);
  for (std::size_t i = 0; i < count; ++i) encode(t, -77.0, dst + i * elt);
}

std::uint64_t count_wrong(const Spec& spec, const Inputs& in, int rank, const std::byte* got, std::size_t count) {
  std::size_t elt = comm::size_of(in.dtype);
  std::uint64_t wrong = 0;
  std::byte want[8];
  for (std::size_t j = 0; j < count; ++j) {
    double expected = spec.expected(in, rank, j);
    double tol = in.op ? tolerance(in.dtype, in.op, in.ranks, expected) : 0.0;
    if (tol == 0.0) {
      encode(in.dtype, expected, want);
      if (std::memcmp(want, got + j * elt, elt) != 0) ++wrong;
    } else {
      double v = decode(in.dtype, got + j * elt);
      if (!(std::fabs(v - expected) <= tol)) ++wrong;
    }
  }
  return wrong;
}

}  // namespace meshbench::collectives
