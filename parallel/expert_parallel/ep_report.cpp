#include "expert_parallel/ep_report.hpp"

#include <algorithm>
#include <array>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "comm/communicator.hpp"
#include "vocab/trace.hpp"

namespace meshbench::parallel {

void report_ep(const EpTotals& mine, int ep, int steps, StepH5* h5, const core::Log& out, MPI_Comm world) {
  if (ep < 2) return;
  int ranks = 1, rank = 0;
  MPI_Comm_size(world, &ranks);
  MPI_Comm_rank(world, &rank);
  constexpr int kCols = 5;
  const double s = 1.0 / std::max(1, steps);
  const std::array<double, kCols> row = {double(mine.rows_recv) * s, mine.expert_s * s, mine.dispatch_s * s,
                                         mine.combine_s * s, mine.counts_s * s};
  std::vector<double> all(static_cast<size_t>(ranks) * kCols);
  MPI_Allgather(row.data(), kCols, MPI_DOUBLE, all.data(), kCols, MPI_DOUBLE, world);
  const std::array<const char*, kCols> names = {"rows_received", "expert_s", "dispatch_s", "combine_s", "counts_s"};
  out.out("  expert parallel per rank and step (rows received by its experts; seconds, forward + backward):\n");
  out.out("  {:>4} {:>14} {:>11} {:>11} {:>11} {:>11}\n", "rank", "rows received", "expert ms", "dispatch ms",
          "combine ms", "counts ms");
  for (int r = 0; r < ranks; ++r) {
    const double* x = &all[size_t(r) * kCols];
    out.out("  {:>4} {:>14.1f} {:>11.3f} {:>11.3f} {:>11.3f} {:>11.3f}\n", r, x[0], x[1] * 1e3, x[2] * 1e3,
            x[3] * 1e3, x[4] * 1e3);
  }
  nlohmann::ordered_json attrs;
  std::array<double, kCols> ratio{};
  for (int k = 0; k < kCols; ++k) {
    std::vector<double> col;
    for (int r = 0; r < ranks; ++r) col.push_back(all[size_t(r) * kCols + k]);
    double sum = 0;
    for (double x : col) sum += x;
    const double mean = sum / ranks, worst = *std::max_element(col.begin(), col.end());
    ratio[size_t(k)] = mean > 0 ? worst / mean : 1.0;
    attrs[fmt::format("ep_{}_per_rank", names[size_t(k)])] = col;
    attrs[fmt::format("ep_{}_worst_over_mean", names[size_t(k)])] = ratio[size_t(k)];
  }
  out.out("  {:>4} {:>14.3f} {:>11.3f} {:>11.3f} {:>11.3f} {:>11.3f}   (worst rank / mean)\n", "w/m", ratio[0],
          ratio[1], ratio[2], ratio[3], ratio[4]);
  if (h5) h5->write_step_attrs(attrs);
}

}  // namespace meshbench::parallel
