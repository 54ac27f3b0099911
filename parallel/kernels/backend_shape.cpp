#include "kernels/backend_shape.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "kernels/moe_layers.hpp"

namespace meshbench::parallel {

template <typename S>
ShapeBackend<S>::~ShapeBackend() {
  for (const auto& [p, len] : maps_) munmap(p, len);
}

// Allocations are carved from reservations of at least kReserve bytes (one mmap for a whole
// model instead of one per buffer, which dominated a plan search's time), 64-byte aligned. A
// released buffer's bytes are never handed out again, so release() has nothing to do: what it
// wrote (a few KB of routing state) stays committed, and marked, until the backend goes.
template <typename S>
void* ShapeBackend<S>::alloc(std::size_t bytes) {
  constexpr std::size_t kReserve = std::size_t{1} << 36, kAlign = 64;  // 64 GiB of address space
  const std::size_t len = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  if (next_ == nullptr || len > left_) {
    const std::size_t size = std::max(kReserve, len);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    maps_[p] = size;
    next_ = static_cast<char*>(p);
    left_ = size;
  }
  void* p = next_;
  next_ += len;
  left_ -= len;
  return p;
}

template <typename S>
bool ShapeBackend<S>::holds_data(const void* p, std::size_t bytes) const {
  const char* lo = static_cast<const char*>(p);
  const char* hi = lo + bytes;
  auto it = data_.upper_bound(lo);  // the first range starting after lo
  if (it != data_.begin() && std::prev(it)->second > lo) return true;
  return it != data_.end() && it->first < hi;
}

template <typename S>
void ShapeBackend<S>::mark(const void* p, std::size_t bytes) {
  if (bytes == 0) return;
  const char* lo = static_cast<const char*>(p);
  const char* hi = lo + bytes;
  auto it = data_.upper_bound(lo);
  if (it != data_.begin() && std::prev(it)->second >= lo) --it;  // merge with the range reaching lo
  while (it != data_.end() && it->first <= hi) {
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->second);
    it = data_.erase(it);
  }
  data_[lo] = hi;
}

template <typename S>
void ShapeBackend<S>::upload(void* dst, const void* host, std::size_t bytes) {
  std::memcpy(dst, host, bytes);
  mark(dst, bytes);
}

template <typename S>
void ShapeBackend<S>::download(void* host, const void* src, std::size_t bytes) {
  std::memcpy(host, src, bytes);  // pages never written read as zeros, committing nothing
}

template <typename S>
template <typename F>
void ShapeBackend<S>::each_data(const void* p, std::size_t bytes, F&& f) const {
  const char* lo = static_cast<const char*>(p);
  const char* hi = lo + bytes;
  auto it = data_.upper_bound(lo);
  if (it != data_.begin() && std::prev(it)->second > lo) --it;
  std::vector<std::pair<std::size_t, std::size_t>> parts;  // collected first: f may mark
  for (; it != data_.end() && it->first < hi; ++it) {
    const char* a = std::max(lo, it->first);
    const char* b = std::min(hi, it->second);
    if (a < b) parts.emplace_back(static_cast<std::size_t>(a - lo), static_cast<std::size_t>(b - a));
  }
  for (const auto& [off, len] : parts) f(off, len);
}

template <typename S>
void ShapeBackend<S>::zero(void* p, std::size_t bytes) {
  // never-written bytes are zeros already; zeroing them would commit their pages
  each_data(p, bytes, [&](std::size_t off, std::size_t len) { std::memset(static_cast<char*>(p) + off, 0, len); });
}

template <typename S>
void ShapeBackend<S>::copy(S* dst, const S* src, int64_t n) {
  count(n);
  each_data(src, sizeof(S) * static_cast<std::size_t>(n), [&](std::size_t off, std::size_t len) {
    std::memmove(reinterpret_cast<char*>(dst) + off, reinterpret_cast<const char*>(src) + off, len);
    mark(reinterpret_cast<char*>(dst) + off, len);
  });
}

template <typename S>
void ShapeBackend<S>::scale(S* x, double a, int64_t n) {
  count(n);
  each_data(x, sizeof(S) * static_cast<std::size_t>(n), [&](std::size_t off, std::size_t len) {
    S* v = x + off / sizeof(S);
    for (std::size_t i = 0; i < len / sizeof(S); ++i) v[i] = static_cast<S>(v[i] * a);
  });
}

template <typename S>
void ShapeBackend<S>::add(S* dst, const S* src, int64_t n) {
  count(n);
  each_data(src, sizeof(S) * static_cast<std::size_t>(n), [&](std::size_t off, std::size_t len) {
    S* d = dst + off / sizeof(S);
    const S* s = src + off / sizeof(S);
    for (std::size_t i = 0; i < len / sizeof(S); ++i) d[i] += s[i];
    mark(d, len);
  });
}

template <typename S>
void ShapeBackend<S>::moe_topk_forward(int32_t* idx, S*, S*, const S*, int N, int E, int k, bool) {
  count(N, E);
  std::vector<int> pairs;
  if (pairs_) {
    pairs = pairs_(N, E, k);
  } else {
    pairs.assign(static_cast<size_t>(E), 0);
    for (int64_t i = 0; i < int64_t{N} * k; ++i) ++pairs[static_cast<size_t>(i % E)];
  }
  int64_t sum = 0;
  for (int c : pairs) {
    if (c < 0 || c > N) throw std::logic_error("ShapeBackend: an expert's pairs outside [0, N]");
    sum += c;
  }
  if (static_cast<int>(pairs.size()) != E || sum != int64_t{N} * k)
    throw std::logic_error("ShapeBackend: routing pairs must be E counts summing to N k");
  // The pairs expert-major in one sequence; column n's choice j is element j N + n. No expert
  // holds more than N consecutive elements, so a column's k choices are distinct experts.
  // Column n is token n, or with stripes s (dividing N) token (n mod s) N/s + n/s.
  std::vector<int32_t> seq;
  seq.reserve(static_cast<size_t>(sum));
  for (int e = 0; e < E; ++e) seq.insert(seq.end(), static_cast<size_t>(pairs[static_cast<size_t>(e)]), e);
  const int s = stripes_ > 1 && N % stripes_ == 0 ? stripes_ : 1;
  for (int n = 0; n < N; ++n) {
    const int64_t token = int64_t{n % s} * (N / s) + n / s;
    for (int j = 0; j < k; ++j) idx[token * k + j] = seq[static_cast<size_t>(int64_t{j} * N + n)];
  }
  mark(idx, sizeof(int32_t) * static_cast<std::size_t>(N) * k);
}

template <typename S>
void ShapeBackend<S>::moe_plan(int32_t* slot, int32_t* counts, S* prob_sum, const int32_t* idx, const S* probs,
                               int N, int E, int k, int capacity) {
  count(N, E);
  parallel::moe_plan(slot, counts, prob_sum, idx, probs, N, E, k, capacity);  // integer bookkeeping, the CPU's
  mark(slot, sizeof(int32_t) * static_cast<std::size_t>(N) * k);
  mark(counts, sizeof(int32_t) * static_cast<std::size_t>(2 * E + 1));
  mark(prob_sum, sizeof(S) * static_cast<std::size_t>(E));
}

template class ShapeBackend<float>;

}  // namespace meshbench::parallel
