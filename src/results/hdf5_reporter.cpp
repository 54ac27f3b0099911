// The HDF5 reporter: /runs/<run_id>/{topology, collectives/...} as docs/results.md lays
// out. It lives on world rank 0, the one writer, and stores what the driver gathered there
// (every rank's samples included). The file is published after each row while that is cheap
// (run_file.hpp), so a killed job keeps every finished size; a failed publish is held in
// error() for the driver, which ends the run.
#include <cstddef>
#include <cstring>
#include <fmt/core.h>
#include <algorithm>
#include <map>

#include "results/h5.hpp"
#include "results/reporter.hpp"
#include "results/run_file.hpp"

namespace meshbench::results {
namespace {


struct SizeRow {
  std::uint64_t bytes, count, send_bytes_per_rank, recv_bytes_per_rank, total_bytes;
};

struct SummaryRow {
  std::uint64_t bytes, count;
  char dtype[8], redop[8];
  std::uint8_t inplace;
  std::int32_t root;
  double t_median, t_min, t_mean, t_p99, t_first, algbw, busbw;
  std::uint64_t wrong;
  std::int32_t slowest_rank;
  std::int32_t iters, warmup_calls;
  std::int8_t warmup_converged;
  double t_median_by_stat[4];  // max, avg, min, rank0
  std::int32_t invalid;
};



Compound<SizeRow> size_type() {
  Compound<SizeRow> t;
  t.add("bytes", &SizeRow::bytes).add("count", &SizeRow::count);
  t.add("send_bytes_per_rank", &SizeRow::send_bytes_per_rank).add("recv_bytes_per_rank", &SizeRow::recv_bytes_per_rank);
  t.add("total_bytes", &SizeRow::total_bytes);
  return t;
}

Compound<SummaryRow> summary_type() {
  using R = SummaryRow;
  Compound<R> t;
  t.add("bytes", &R::bytes).add("count", &R::count).add("dtype", &R::dtype).add("redop", &R::redop);
  t.add("inplace", &R::inplace).add("root", &R::root);
  t.add("t_median", &R::t_median).add("t_min", &R::t_min).add("t_mean", &R::t_mean).add("t_p99", &R::t_p99);
  t.add("t_first", &R::t_first).add("algbw", &R::algbw).add("busbw", &R::busbw);
  t.add("wrong", &R::wrong).add("slowest_rank", &R::slowest_rank).add("iters", &R::iters);
  t.add("warmup_calls", &R::warmup_calls).add("warmup_converged", &R::warmup_converged);
  const char* stats[] = {"t_median_max", "t_median_avg", "t_median_min", "t_median_rank0"};
  for (std::size_t i = 0; i < 4; ++i) t.add(stats[i], &R::t_median_by_stat, i);
  t.add("invalid", &R::invalid);
  return t;
}

}  // namespace

struct Hdf5Reporter::Impl {
  std::unique_ptr<RunFile> file;
  int size = 1;  // world ranks: the samples' last dimension
  Compound<SizeRow> size_t_ = size_type();
  Compound<SummaryRow> summary_t_ = summary_type();
  struct Series {
    H5Id group;
    std::unique_ptr<AppendTable> sizes, summary;
    std::unique_ptr<SampleCube> samples;
    std::unique_ptr<AppendMatrix> group_t_median;
  };
  std::map<std::string, Series> series;  // by HDF5 path, placement included

  static std::string series_path(const Block& b, int placement) {
    return fmt::format("collectives/{}/{}-{}-{}-{}", b.collective, b.dtype, b.redop,
                       name(static_cast<Placement>(placement)), b.group);
  }
};

Hdf5Reporter::Hdf5Reporter(const std::string& path, bool append, RunContext& ctx)
    : impl_(std::make_unique<Impl>()) {
  impl_->file = std::make_unique<RunFile>(path, append, ctx);
  impl_->size = static_cast<int>(ctx.topology.ranks.size());
  run_id_ = ctx.run_id;
}

Hdf5Reporter::~Hdf5Reporter() = default;

void Hdf5Reporter::begin_run(const RunContext& ctx, const std::vector<GroupInfo>& groups) {
  impl_->file->begin(ctx, groups);
}

void Hdf5Reporter::begin_block(const Block& b) {
  Impl& m = *impl_;
  for (int p = 0; p < 2; ++p) {
    if (!b.runs[static_cast<size_t>(p)]) continue;
    std::string path = Impl::series_path(b, p);
    Impl::Series s;
    s.group = create_group(m.file->run(), path);
    nlohmann::ordered_json a = {{"collective", b.collective}, {"dtype", b.dtype}, {"redop", b.redop},
                                {"placement", name(static_cast<Placement>(p))}, {"group", b.group},
                                {"group_size", b.group_size}, {"groups", b.groups}, {"bus_factor", b.bus_factor}, {"root", b.root},
                                {"timing", b.timing}, {"iters", b.iters}, {"warmup", b.warmup},
                                {"rank_stat", b.rank_stat}};
    write_attrs(s.group.get(), a);
    s.sizes = std::make_unique<AppendTable>(s.group.get(), "sizes", m.size_t_.id());
    s.samples = std::make_unique<SampleCube>(s.group.get(), "samples", static_cast<hsize_t>(b.iters),
                                             static_cast<hsize_t>(m.size));
    s.summary = std::make_unique<AppendTable>(s.group.get(), "summary", m.summary_t_.id());
    s.group_t_median = std::make_unique<AppendMatrix>(s.group.get(), "group_t_median", static_cast<hsize_t>(b.groups));
    m.series[path] = std::move(s);
  }
}

void Hdf5Reporter::row(const Block& b, const Row& r) {
  Impl& m = *impl_;
  for (int p = 0; p < 2; ++p) {
    const PointResult& pt = r.by_placement[static_cast<size_t>(p)];
    auto it = m.series.find(Impl::series_path(b, p));
    if (it == m.series.end() || !pt.ran) continue;
    SizeRow sr{r.sizes.bytes, r.sizes.count, r.sizes.send_bytes_per_rank, r.sizes.recv_bytes_per_rank,
               r.sizes.total_bytes};
    it->second.sizes->append(&sr);
    it->second.samples->append(pt.samples);
    SummaryRow sum{};
    sum.bytes = r.sizes.bytes;
    sum.count = r.sizes.count;
    put_fixed(sum.dtype, b.dtype);
    put_fixed(sum.redop, b.redop);
    sum.inplace = p == 1;
    sum.root = b.root;
    sum.t_median = pt.t_median;
    sum.t_min = pt.t_min;
    sum.t_mean = pt.t_mean;
    sum.t_p99 = pt.t_p99;
    sum.t_first = pt.t_first;
    sum.algbw = pt.algbw;
    sum.busbw = pt.busbw;
    sum.wrong = pt.wrong;
    sum.slowest_rank = pt.slowest_rank;
    sum.iters = pt.iters;
    sum.warmup_calls = pt.warmup_calls;
    sum.warmup_converged = static_cast<std::int8_t>(pt.warmup_converged);
    std::copy(pt.t_by_stat.begin(), pt.t_by_stat.end(), sum.t_median_by_stat);
    sum.invalid = pt.invalid;
    it->second.summary->append(&sum);
    it->second.group_t_median->append(pt.group_t_median);
  }
  m.file->publish();
}

void Hdf5Reporter::end_block(const Block& b) {
  for (int p = 0; p < 2; ++p) impl_->series.erase(Impl::series_path(b, p));
  impl_->file->publish(true);
}

const std::string& Hdf5Reporter::error() const { return impl_->file->error(); }

void Hdf5Reporter::add_run_attrs(const nlohmann::ordered_json& attrs) { write_attrs(impl_->file->run(), attrs); }

void Hdf5Reporter::finish(RunStatus s) {
  impl_->series.clear();
  impl_->file->finish(s);
}

}  // namespace meshbench::results
