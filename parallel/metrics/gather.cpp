#include "metrics/gather.hpp"

#include <cstdio>
#include <map>
#include <string>

#include "comm/watched_comm.hpp"
#include "core/error.hpp"

namespace meshbench::parallel {

int detail::byte_layout(int mine, std::vector<int>& counts, std::vector<int>& displs, bool all, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  counts.assign(static_cast<size_t>(size), 0);
  displs.assign(static_cast<size_t>(size), 0);
  if (all)
    MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  else
    MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<size_t>(r)] = total;
    total += counts[static_cast<size_t>(r)];
  }
  return total;
}

std::vector<AnalyticBytes> sum_over_ranks(const std::vector<AnalyticBytes>& local, int ranks, MPI_Comm world) {
  struct Row {
    char dim[16], kind[24];
    uint64_t payload, total;
    double wire;
  };
  std::vector<Row> mine;
  for (const AnalyticBytes& a : local) {
    Row r{};
    std::snprintf(r.dim, sizeof r.dim, "%s", a.dim.c_str());
    std::snprintf(r.kind, sizeof r.kind, "%s", a.kind.c_str());
    r.payload = a.payload;
    r.total = a.total;
    r.wire = a.wire;
    mine.push_back(r);
  }
  std::map<std::pair<std::string, std::string>, AnalyticBytes> sum;
  for (const Row& r : gather_rows(mine, world)) {
    AnalyticBytes& a = sum[{r.dim, r.kind}];
    a.dim = r.dim;
    a.kind = r.kind;
    a.all_ranks += r.payload;
    a.total += r.total;
    a.wire += r.wire / ranks;  // per rank, the mean
  }
  std::vector<AnalyticBytes> out;
  for (auto& [k, a] : sum) {
    a.payload = a.all_ranks / static_cast<uint64_t>(ranks);
    out.push_back(a);
  }
  return out;
}

RankMetrics measure_rank(const Trace& trace, int rank, double offset, MPI_Comm world, PipelineRow* pipe,
                         double theory) {
  const std::vector<P2pPost> posts = allgather_rows(p2p_posts(trace, offset), world);
  RankMetrics rm = rank_metrics(trace, rank, offset, posts);
  if (pipe) *pipe = pipeline_row(trace, rank, offset, rm.split, posts, theory);
  return rm;
}

double global_mean_loss(double mine, core::OpWatch* watch, MPI_Comm world) {
  int size = 1;
  MPI_Comm_size(world, &size);
  double loss = 0;
  comm::WatchScope w(watch, "MPI_Allreduce (loss)", sizeof loss, "world");
  MB_CHECK_MPI(MPI_Allreduce(&mine, &loss, 1, MPI_DOUBLE, MPI_SUM, world), "world");
  return loss / size;
}

StepPoint gather_step_point(int step, double time, const std::array<double, 4>& phases, double loss,
                            core::OpWatch* watch, MPI_Comm world) {
  int size = 1, rank = 0;
  MPI_Comm_size(world, &size);
  MPI_Comm_rank(world, &rank);
  StepPoint p;
  p.step = step;
  p.loss = loss;
  if (rank == 0) {
    p.times.resize(static_cast<size_t>(size));
    p.phases.resize(static_cast<size_t>(size) * phases.size());
  }
  comm::WatchScope w(watch, "MPI_Gather (step times for the results file)", sizeof time, "world");
  MB_CHECK_MPI(MPI_Gather(&time, 1, MPI_DOUBLE, p.times.data(), 1, MPI_DOUBLE, 0, world), "world");
  MB_CHECK_MPI(MPI_Gather(phases.data(), 4, MPI_DOUBLE, p.phases.data(), 4, MPI_DOUBLE, 0, world), "world");
  return p;
}

namespace {

// Every rank's step times, phases and peak into rank 0's [steps][ranks] tables.
void gather_steps(StepRecord& rec, const RankMetrics& rm, double peak, MPI_Comm world) {
  const int world_size = rec.ranks, n = rec.steps;
  std::vector<double> times(static_cast<size_t>(n) * world_size), ph(static_cast<size_t>(n) * world_size * 4), mine;
  for (const auto& p : rm.phases) mine.insert(mine.end(), p.begin(), p.end());
  rec.peak.resize(static_cast<size_t>(world_size));
  MPI_Gather(rm.step_time.data(), n, MPI_DOUBLE, times.data(), n, MPI_DOUBLE, 0, world);
  MPI_Gather(mine.data(), 4 * n, MPI_DOUBLE, ph.data(), 4 * n, MPI_DOUBLE, 0, world);
  MPI_Gather(&peak, 1, MPI_DOUBLE, rec.peak.data(), 1, MPI_DOUBLE, 0, world);
  rec.step_time.assign(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(world_size)));
  rec.phases.assign(static_cast<size_t>(n), std::vector<std::array<double, 4>>(static_cast<size_t>(world_size)));
  for (size_t r = 0; r < static_cast<size_t>(world_size); ++r)
    for (size_t s = 0; s < static_cast<size_t>(n); ++s) {
      rec.step_time[s][r] = times[r * n + s];
      for (size_t k = 0; k < 4; ++k) rec.phases[s][r][k] = ph[(r * n + s) * 4 + k];
    }
}

// The MoE counts over every rank (tensor-parallel ranks route the same tokens: divided by tp).
MoeSummary gather_moe(const MoeTotals& mine, int tp, MPI_Comm world) {
  MoeSummary m;
  m.on = true;
  int64_t sums[2] = {mine.routed, mine.dropped}, all[2] = {0, 0};
  MPI_Allreduce(sums, all, 2, MPI_INT64_T, MPI_SUM, world);
  MPI_Allreduce(&mine.worst_expert, &m.worst_expert, 1, MPI_INT64_T, MPI_MAX, world);
  m.routed = all[0] / tp;
  m.dropped = all[1] / tp;
  return m;
}

void gather_clocks(StepRecord& rec, const comm::ClockOffset& clock, MPI_Comm world) {
  rec.offsets.resize(static_cast<size_t>(rec.ranks));
  MPI_Gather(&clock, 2, MPI_DOUBLE, rec.offsets.data(), 2, MPI_DOUBLE, 0, world);
  rec.clock_error_max = clock.error_s;
  MPI_Allreduce(MPI_IN_PLACE, &rec.clock_error_max, 1, MPI_DOUBLE, MPI_MAX, world);
}

}  // namespace

void gather_record(StepRecord& rec, const RankPart& mine, MPI_Comm world) {
  const RankMetrics& rm = *mine.metrics;
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &rec.ranks);
  rec.steps = static_cast<int>(rm.step_time.size());
  rec.analytic = sum_over_ranks(mine.analytic, rec.ranks, world);
  gather_steps(rec, rm, mine.peak, world);
  rec.comm = gather_rows(rm.comm, world);
  rec.split = gather_rows(split_rows(rm.split, rank), world);
  if (mine.pipeline) rec.pipeline = gather_rows(std::vector<PipelineRow>{*mine.pipeline}, world);
  if (mine.moe_on) rec.moe = gather_moe(mine.moe, mine.tp, world);
  if (mine.ep > 1) rec.ep = ep_imbalance(gather_rows(std::vector<EpRankRow>{ep_rank_row(mine.moe.ep, rec.steps)}, world));
  rec.memory = mine.memory;
  rec.memory_cells = gather_rows(memory_cells(mine.memory, rank), world);
  rec.events = gather_rows(mine.events, world);
  rec.slots = gather_rows(mine.slots, world);
  rec.passes = gather_rows(mine.passes, world);
  gather_clocks(rec, mine.clock, world);
}

}  // namespace meshbench::parallel
