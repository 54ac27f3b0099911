#include "runner.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "comm/watched_comm.hpp"
#include "core/error.hpp"
#include "core/stats.hpp"
#include "core/timer.hpp"
#include "core/warmup.hpp"
#include "data.hpp"

namespace meshbench::collectives {

using results::Placement;

using comm::WatchScope;

Runner::Runner(const Spec& spec, const Options& opt, comm::Communicator& comm, MPI_Comm world, const GroupPlan& plan,
               core::OpWatch* watch)
    : spec_(spec), opt_(opt), comm_(comm), world_(world), plan_(plan), watch_(watch) {
  MPI_Comm_rank(world, &world_rank_);
  MPI_Comm_size(world, &world_size_);
}

void Runner::phase(const char* what) {
  if (watch_) watch_->set_context(where_ + ", " + what);
}

int time_back_to_back(comm::Communicator& c, comm::Timer& t, int count, bool graph, const std::function<void()>& call,
                      std::vector<double>& out) {
  if (count <= 0) return 0;
  std::unique_ptr<comm::Captured> g;
  if (graph) {
    g = c.capture([&] {
      for (int i = 0; i < count; ++i) call();
    });
    if (!g) throw core::UsageError("--timing graph: backend " + std::string(comm::name(c.backend())) + " cannot capture");
  }
  c.barrier();
  t.mark(0);
  if (g) {
    g->launch();
  } else {
    for (int i = 0; i < count; ++i) call();
  }
  t.mark(1);
  t.sync();
  out.insert(out.end(), static_cast<std::size_t>(count), t.elapsed(0, 1) / count);
  return count;
}

double Runner::isolated_call(comm::Timer& t, const Views& v, const Inputs& in) {
  comm_.barrier();
  t.mark(0);
  spec_.call(comm_, v, in);
  t.mark(1);
  {
    WatchScope w(watch_, "timer sync", 0, comm_.group_name().c_str());
    t.sync();
  }
  return t.elapsed(0, 1);
}

int Runner::run_calls(const Views& v, const Inputs& in, int count, std::vector<double>& out) {
  if (count <= 0) return 0;
  if (opt_.timing == Timing::kWindow) return run_window(v, in, count, out);
  std::size_t first = out.size();
  out.resize(first + static_cast<std::size_t>(count));
  if (!timer_ || timer_marks_ < count + 1) {  // grown outside any timed interval
    timer_marks_ = std::max(count + 1, 2 * timer_marks_);
    timer_ = comm_.make_timer(timer_marks_);
  }
  comm::Timer& t = *timer_;
  if (opt_.timing == Timing::kStream || opt_.timing == Timing::kGraph) {
    WatchScope w(watch_, "back-to-back calls", 0, comm_.group_name().c_str());
    return time_back_to_back(comm_, t, count, opt_.timing == Timing::kGraph, [&] { spec_.call(comm_, v, in); }, out);
  }
  if (opt_.timing == Timing::kIsolated) {
    for (int i = 0; i < count; ++i) out[first + static_cast<std::size_t>(i)] = isolated_call(t, v, in);
    return count;
  }
  comm_.barrier();
  t.mark(0);
  for (int i = 0; i < count; ++i) {
    spec_.call(comm_, v, in);
    t.mark(i + 1);
  }
  WatchScope w(watch_, "timer sync", 0, comm_.group_name().c_str());
  t.sync();
  for (int i = 0; i < count; ++i) out[first + static_cast<std::size_t>(i)] = t.elapsed(i, i + 1);
  return count;
}

// ReproMPI's window scheme (Hunold and Carpen-Amarie): world rank 0 fixes when the first call
// starts on its clock; call i starts at that time + i * window on every rank's clock (local
// = global + offset), and is timed from that start to the local completion. A call that any
// rank reached after its start time is dropped on every rank and counted. Too many late
// starts double the window (and a late first call the lead) for the next batch.
int Runner::run_window(const Views& v, const Inputs& in, int count, std::vector<double>& out) {
  constexpr double kStartSlack = 1e-6;  // seconds
  double start = world_rank_ == 0 ? core::now_seconds() + lead_s_ : 0;
  {
    WatchScope w(watch_, "MPI_Bcast (window start)", sizeof start, "world");
    MB_CHECK_MPI(MPI_Bcast(&start, 1, MPI_DOUBLE, 0, world_), "world");
  }
  std::vector<int> late(static_cast<std::size_t>(count), 0);
  std::vector<double> t(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    double target = start + i * window_s_ + clock_.offset_s;
    double now = core::now_seconds();
    while (now < target) now = core::now_seconds();
    // Late: past the start already, or descheduled while waiting for it (a clock read is
    // tens of ns, so an on-time start is well inside kStartSlack).
    late[static_cast<std::size_t>(i)] = now - target > kStartSlack;
    spec_.call(comm_, v, in);
    t[static_cast<std::size_t>(i)] = core::now_seconds() - target;
  }
  {
    WatchScope w(watch_, "MPI_Allreduce (late starts)", late.size() * sizeof(int), "world");
    MB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, late.data(), count, MPI_INT, MPI_MAX, world_), "world");
  }
  int kept = 0;
  for (int i = 0; i < count; ++i) {
    if (late[static_cast<std::size_t>(i)]) continue;
    out.push_back(t[static_cast<std::size_t>(i)]);
    ++kept;
  }
  invalid_ += count - kept;
  if (late.front()) lead_s_ = std::min(2 * lead_s_, 1.0);
  if (4 * (count - kept) > count) window_s_ = std::min(2 * window_s_, 1.0);
  return kept;
}

void Runner::warm_up(const Views& v, const Inputs& in, results::PointResult& r) {
  std::vector<double> times;
  if (opt_.warmup >= 0) {
    run_calls(v, in, opt_.warmup, times);
    r.warmup_calls = opt_.warmup;
    r.warmup_converged = -1;
    return;
  }
  // Every rank feeds the tracker the same numbers (maxima over ranks), so all stop together.
  core::WarmupTracker tracker(opt_.warmup_policy);
  while (!tracker.done()) {
    int k = tracker.next_window();
    double t0 = core::now_seconds();
    times.clear();
    run_calls(v, in, k, times);
    double med = times.empty() ? window_s_ : core::median(times);  // window: every start late
    double local[2] = {med, core::now_seconds() - t0}, global[2] = {0, 0};
    WatchScope w(watch_, "MPI_Allreduce (warm-up check)", sizeof local, "world");
    MB_CHECK_MPI(MPI_Allreduce(local, global, 2, MPI_DOUBLE, MPI_MAX, world_), "world");
    tracker.add_window(k, global[0], global[1]);
  }
  r.warmup_calls = tracker.calls();
  r.warmup_converged = tracker.converged() ? 1 : 0;
  // Window timing: a slot of three warm calls plus the clocks' uncertainty.
  if (opt_.timing == Timing::kWindow)
    window_s_ = std::clamp(3 * tracker.last_median() + 4 * max_clock_error_, 5e-6, 1.0);
}

std::vector<double> Runner::timed(const Views& v, const Inputs& in) {
  std::vector<double> mine;
  // -n valid iterations (window timing may drop some; a few more batches make them up).
  for (int batch = 0; static_cast<int>(mine.size()) < opt_.iters && batch < 8; ++batch)
    run_calls(v, in, opt_.iters - static_cast<int>(mine.size()), mine);
  if (opt_.iters_fixed) return mine;
  // At least --min-time seconds of timed calls (the slowest rank's sum), at most --max-iters;
  // each round adds the calls the average so far says are missing (at least one).
  for (int round = 0; round < 64; ++round) {
    double local = std::accumulate(mine.begin(), mine.end(), 0.0), total = 0;
    WatchScope w(watch_, "MPI_Allreduce (--min-time check)", sizeof local, "world");
    MB_CHECK_MPI(MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_MAX, world_), "world");
    auto have = static_cast<int>(mine.size());
    if (total >= opt_.min_time || have >= opt_.max_iters) break;
    double per_call = std::max(total / std::max(have, 1), 1e-9);
    double want = std::ceil((opt_.min_time - total) / per_call * 1.05);
    int extra = static_cast<int>(std::min(want, static_cast<double>(opt_.max_iters - have)));
    run_calls(v, in, std::max(extra, 1), mine);
  }
  return mine;
}

void Runner::summarize(std::vector<double> mine, double first, std::uint64_t wrong, results::PointResult& r) {
  // Statistics over every rank of the world (the slowest group decides). Every rank ran the
  // same number of iterations: the counts follow from values reduced over the world.
  const int iters = static_cast<int>(mine.size());
  std::vector<double> by_rank(world_rank_ == 0 ? mine.size() * static_cast<std::size_t>(world_size_) : 0);
  WatchScope w(watch_, "MPI_Gather+Allreduce (statistics)", mine.size() * sizeof(double), "world");
  MB_CHECK_MPI(MPI_Gather(mine.data(), iters, MPI_DOUBLE, by_rank.data(), iters, MPI_DOUBLE, 0, world_), "world");
  MB_CHECK_MPI(MPI_Allreduce(&wrong, &r.wrong, 1, MPI_UINT64_T, MPI_SUM, world_), "world");
  MB_CHECK_MPI(MPI_Reduce(&first, &r.t_first, 1, MPI_DOUBLE, MPI_MAX, 0, world_), "world");
  r.iters = iters;
  if (world_rank_ == 0) {
    std::vector<double> by_iter(by_rank.size());  // [iter][rank]
    for (int rk = 0; rk < world_size_; ++rk)
      for (int i = 0; i < iters; ++i)
        by_iter[static_cast<std::size_t>(i * world_size_ + rk)] = by_rank[static_cast<std::size_t>(rk * iters + i)];
    core::SampleSummary s = core::summarize(by_iter, iters, world_size_, opt_.rank_stat);
    r.t_median = s.t_median;
    r.t_min = s.t_min;
    r.t_mean = s.t_mean;
    r.t_p99 = s.t_p99;
    r.slowest_rank = s.slowest_rank;
    std::copy(std::begin(s.median_by_stat), std::end(s.median_by_stat), r.t_by_stat.begin());
    // Per group: the median over iterations of the group's slowest member.
    for (const auto& g : plan_.run_groups) {
      std::vector<double> worst(static_cast<std::size_t>(iters), 0.0);
      for (int i = 0; i < iters; ++i)
        for (int m : g.ranks)
          worst[static_cast<std::size_t>(i)] =
              std::max(worst[static_cast<std::size_t>(i)], by_iter[static_cast<std::size_t>(i * world_size_ + m)]);
      r.group_t_median.push_back(core::median(worst));
    }
    r.samples = std::move(by_iter);
  }
}

results::PointResult Runner::measure(const Inputs& in, Placement placement, Buffers& b, const std::string& where) {
  where_ = where + " " + results::name(placement);
  phase("cold verified call");
  std::size_t elt = comm::size_of(in.dtype);
  Views v;
  comm::View buf_view;
  if (placement == Placement::kInPlace) {
    buf_view = {b.send.data(), spec_.inplace_buffer(in.layout), in.dtype, opt_.mem};
    v = spec_.inplace(comm_, buf_view, in.layout);
    fill_sentinel(in.dtype, b.host_in.data(), buf_view.count);
    auto offset = static_cast<std::size_t>(static_cast<std::byte*>(v.send.data) - static_cast<std::byte*>(buf_view.data));
    fill_inputs(in, comm_.rank(), b.host_in.data() + offset, 0, v.send.count);
    b.send.upload(b.host_in.data(), buf_view.bytes());
  } else {
    v.send = {b.send.data(), in.layout.send, in.dtype, opt_.mem};
    v.recv = {b.recv.data(), in.layout.recv, in.dtype, opt_.mem};
    fill_inputs(in, comm_.rank(), b.host_in.data(), 0, v.send.count);
    b.send.upload(b.host_in.data(), v.send.bytes());
    fill_sentinel(in.dtype, b.host_in.data(), v.recv.count);
    b.recv.upload(b.host_in.data(), v.recv.bytes());
  }

  results::PointResult r;
  r.ran = true;
  // The cold first call: timed on its own (isolated), and the one whose result is verified.
  std::vector<double> cold;
  cold.push_back(isolated_call(*(timer_ ? timer_ : (timer_ = comm_.make_timer(timer_marks_ = 2))), v, in));
  std::uint64_t wrong = 0;
  if (opt_.check) {
    auto offset = static_cast<std::byte*>(v.recv.data) -
                  static_cast<std::byte*>(placement == Placement::kInPlace ? buf_view.data : v.recv.data);
    compute::Buffer& holder = placement == Placement::kInPlace ? b.send : b.recv;
    holder.download(b.host_out.data(), static_cast<std::size_t>(offset) + v.recv.bytes());
    std::byte* got = b.host_out.data() + offset;
    // Flip the top exponent bit of element 0 (little-endian: its last byte): a low-byte flip
    // stays inside avg's tolerance (always for double, for floats whose value is 0).
    if (opt_.inject_fault == world_rank_ && v.recv.count > 0) got[elt - 1] ^= std::byte{0x40};
    wrong = count_wrong(spec_, in, comm_.rank(), got, v.recv.count);
  }

  phase(opt_.warmup < 0 ? "adaptive warm-up" : "warm-up");
  if (opt_.timing == Timing::kWindow) {
    // A first window from the cold call (the slowest rank's), refined after warm-up.
    double cold_max = 0;
    WatchScope w(watch_, "MPI_Allreduce (cold time)", sizeof cold_max, "world");
    MB_CHECK_MPI(MPI_Allreduce(&cold.front(), &cold_max, 1, MPI_DOUBLE, MPI_MAX, world_), "world");
    window_s_ = std::clamp(4 * cold_max + 4 * max_clock_error_, 5e-6, 1.0);
    lead_s_ = std::max(1e-4, 2 * window_s_);
  }
  warm_up(v, in, r);
  comm_.synchronize();
  phase("timed loop");
  invalid_ = 0;
  std::vector<double> mine = timed(v, in);
  r.invalid = invalid_;
  phase("statistics");
  summarize(std::move(mine), cold.front(), wrong, r);
  return r;
}

}  // namespace meshbench::collectives
