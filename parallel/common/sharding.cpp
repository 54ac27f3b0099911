#include "common/sharding.hpp"

#include <algorithm>
#include <fmt/core.h>
#include <stdexcept>

namespace meshbench::parallel {

void for_each_run(const LayoutEntry& e, const LayoutEntry& f,
                  const std::function<void(int64_t, int64_t, int64_t)>& run) {
  const Shard& s = e.shard;
  auto bad = [&](const char* why) {
    return std::logic_error(fmt::format("shard of {}: {}", e.name, why));
  };
  if (s.rule == ShardRule::kReplicated) {
    if (e.numel != f.numel) throw bad("replicated but its size differs from the full tensor");
    run(e.offset, f.offset, e.numel);
    return;
  }
  if (e.shape.empty() || f.shape.empty()) throw bad("a split tensor needs a shape");
  const int64_t rows = e.shape[0], row = e.numel / rows;  // local rows, elements per row
  if (s.rule == ShardRule::kRowSplit) {
    const std::vector<int64_t> parts = s.parts.empty() ? std::vector<int64_t>{rows} : s.parts;
    if (s.full_rows >= 0 && parts.size() != 1) throw bad("a padded split has one part");
    int64_t local_row = 0, full_part = 0;  // the part's first local row and first full row
    for (int64_t r : parts) {
      const int64_t real = s.full_rows >= 0 ? s.full_rows : r * s.count;  // the part's real rows
      for (int64_t i = 0; i < r; ++i) {
        const int64_t fr = int64_t{s.index} * r + i;  // row inside the part
        run(e.offset + (local_row + i) * row, fr < real ? f.offset + (full_part + fr) * row : -1, row);
      }
      local_row += r;
      full_part += real;
    }
    if (local_row != rows) throw bad("its parts do not add up to its rows");
    return;
  }
  // kColSplit: rank index holds columns [index x cols, (index + 1) x cols) of every row.
  const int64_t cols = row, full_cols = f.numel / f.shape[0];
  if (f.shape[0] != rows || cols * s.count != full_cols) throw bad("its columns do not split the full tensor");
  for (int64_t i = 0; i < rows; ++i) run(e.offset + i * cols, f.offset + i * full_cols + int64_t{s.index} * cols, cols);
}

template <typename S>
void place_in_full(const Layout& local, const S* local_flat, const Layout& full, S* full_flat, uint8_t* owned) {
  for (const LayoutEntry& e : local.entries())
    for_each_run(e, full.find(e.name), [&](int64_t lo, int64_t fo, int64_t n) {
      if (fo < 0) return;
      std::copy(local_flat + lo, local_flat + lo + n, full_flat + fo);
      if (owned) std::fill(owned + fo, owned + fo + n, uint8_t{1});
    });
}

template <typename S>
void take_from_full(const Layout& full, const S* full_flat, const Layout& local, S* local_flat) {
  for (const LayoutEntry& e : local.entries())
    for_each_run(e, full.find(e.name), [&](int64_t lo, int64_t fo, int64_t n) {
      if (fo < 0)
        std::fill(local_flat + lo, local_flat + lo + n, S(0));
      else
        std::copy(full_flat + fo, full_flat + fo + n, local_flat + lo);
    });
}

template void place_in_full<float>(const Layout&, const float*, const Layout&, float*, uint8_t*);
template void place_in_full<double>(const Layout&, const double*, const Layout&, double*, uint8_t*);
template void take_from_full<float>(const Layout&, const float*, const Layout&, float*);
template void take_from_full<double>(const Layout&, const double*, const Layout&, double*);

}  // namespace meshbench::parallel
