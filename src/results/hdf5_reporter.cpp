// The HDF5 reporter: /runs/<run_id>/{topology, collectives/...} as results/README.md lays
// out. Every rank calls every method (parallel HDF5 metadata calls are collective); rank 0
// supplies shared rows, each rank its own sample column. The file is flushed after each
// row so a killed job keeps every finished size.
#include <cstddef>
#include <cstring>
#include <fmt/core.h>
#include <algorithm>
#include <map>

#include "results/h5.hpp"
#include "results/reporter.hpp"

namespace meshbench::results {
namespace {

template <size_t N>
void put(char (&dst)[N], const std::string& s) {
  std::memset(dst, 0, N);
  std::memcpy(dst, s.data(), std::min(N, s.size()));
}

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
};

struct RankRow {
  std::int32_t rank;
  char host[64];
  std::int32_t node, local_rank;
  char cores[64], device[32];
};

struct GroupRow {
  char dim[16];
  std::int32_t id, size;
  char ranks[256];
  std::int32_t nodes_spanned;
  char span[8];
};

H5Id size_type() {
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(SizeRow)), H5Tclose);
  H5Tinsert(t.get(), "bytes", offsetof(SizeRow, bytes), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "count", offsetof(SizeRow, count), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "send_bytes_per_rank", offsetof(SizeRow, send_bytes_per_rank), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "recv_bytes_per_rank", offsetof(SizeRow, recv_bytes_per_rank), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "total_bytes", offsetof(SizeRow, total_bytes), H5T_NATIVE_UINT64);
  return t;
}

H5Id summary_type() {
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(SummaryRow)), H5Tclose);
  H5Id s8 = string_type(8);
  H5Tinsert(t.get(), "bytes", offsetof(SummaryRow, bytes), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "count", offsetof(SummaryRow, count), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "dtype", offsetof(SummaryRow, dtype), s8.get());
  H5Tinsert(t.get(), "redop", offsetof(SummaryRow, redop), s8.get());
  H5Tinsert(t.get(), "inplace", offsetof(SummaryRow, inplace), H5T_NATIVE_UINT8);
  H5Tinsert(t.get(), "root", offsetof(SummaryRow, root), H5T_NATIVE_INT32);
  const char* reals[] = {"t_median", "t_min", "t_mean", "t_p99", "t_first", "algbw", "busbw"};
  for (size_t i = 0; i < 7; ++i)
    H5Tinsert(t.get(), reals[i], offsetof(SummaryRow, t_median) + i * sizeof(double), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "wrong", offsetof(SummaryRow, wrong), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "slowest_rank", offsetof(SummaryRow, slowest_rank), H5T_NATIVE_INT32);
  return t;
}

H5Id rank_type() {
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(RankRow)), H5Tclose);
  H5Id s64 = string_type(64), s32 = string_type(32);
  H5Tinsert(t.get(), "rank", offsetof(RankRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "host", offsetof(RankRow, host), s64.get());
  H5Tinsert(t.get(), "node", offsetof(RankRow, node), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "local_rank", offsetof(RankRow, local_rank), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "cores", offsetof(RankRow, cores), s64.get());
  H5Tinsert(t.get(), "device", offsetof(RankRow, device), s32.get());
  return t;
}

H5Id group_type() {
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(GroupRow)), H5Tclose);
  H5Id s16 = string_type(16), s256 = string_type(256), s8 = string_type(8);
  H5Tinsert(t.get(), "dim", offsetof(GroupRow, dim), s16.get());
  H5Tinsert(t.get(), "id", offsetof(GroupRow, id), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "size", offsetof(GroupRow, size), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "ranks", offsetof(GroupRow, ranks), s256.get());
  H5Tinsert(t.get(), "nodes_spanned", offsetof(GroupRow, nodes_spanned), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "span", offsetof(GroupRow, span), s8.get());
  return t;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

struct Hdf5Reporter::Impl {
  MPI_Comm world;
  int rank = 0, size = 1;
  std::string path;
  H5Id file, run;
  H5Id size_t_, summary_t_;
  struct Series {
    H5Id group;
    std::unique_ptr<AppendTable> sizes, summary;
    std::unique_ptr<SampleCube> samples;
    std::unique_ptr<AppendMatrix> group_t_median;
  };
  std::map<std::string, Series> series;  // by HDF5 path, placement included
  nlohmann::ordered_json attrs;

  static std::string series_path(const Block& b, int placement) {
    return fmt::format("collectives/{}/{}-{}-{}-{}", b.collective, b.dtype, b.redop,
                       name(static_cast<Placement>(placement)), b.group);
  }
};

Hdf5Reporter::Hdf5Reporter(const std::string& path, bool append, MPI_Comm world, RunContext& ctx)
    : impl_(std::make_unique<Impl>()) {
  impl_->world = world;
  impl_->path = path;
  MPI_Comm_rank(world, &impl_->rank);
  MPI_Comm_size(world, &impl_->size);
  impl_->file = open_file(path, world, append);
  hid_t f = impl_->file.get();
  if (!append || !exists(f, "runs")) {
    write_attr(f, "schema_version", kSchemaVersion);
    write_attr(f, "suite_version", suite_version());
    write_attr(f, "git_sha", git_sha());
  }
  std::string id = ctx.run_id;
  for (int k = 2; exists(f, "runs/" + id); ++k) id = ctx.run_id + "-" + std::to_string(k);
  ctx.run_id = id;
  ctx.attrs["run_id"] = id;
  run_id_ = id;
  impl_->size_t_ = size_type();
  impl_->summary_t_ = summary_type();
}

Hdf5Reporter::~Hdf5Reporter() = default;

void Hdf5Reporter::begin_run(const RunContext& ctx, const std::vector<GroupInfo>& groups) {
  Impl& m = *impl_;
  m.run = create_group(m.file.get(), "runs/" + ctx.run_id);
  m.attrs = ctx.attrs;
  write_attrs(m.run.get(), m.attrs);

  H5Id topo = create_group(m.run.get(), "topology");
  write_attr(topo.get(), "nodes_emulated", ctx.topology.emulated);
  std::vector<RankRow> ranks(ctx.topology.ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto& p = ctx.topology.ranks[i];
    ranks[i].rank = p.rank;
    put(ranks[i].host, p.host);
    ranks[i].node = p.node;
    ranks[i].local_rank = p.local_rank;
    put(ranks[i].cores, p.cores);
    put(ranks[i].device, p.device);
  }
  H5Id rt = rank_type();
  write_table(topo.get(), "ranks", rt.get(), ranks.data(), ranks.size(), m.rank == 0);
  std::vector<GroupRow> rows(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    put(rows[i].dim, groups[i].dim);
    rows[i].id = groups[i].id;
    rows[i].size = static_cast<std::int32_t>(groups[i].ranks.size());
    put(rows[i].ranks, join(groups[i].ranks));
    rows[i].nodes_spanned = groups[i].nodes_spanned;
    put(rows[i].span, groups[i].span);
  }
  H5Id gt = group_type();
  GroupRow dummy{};
  write_table(topo.get(), "groups", gt.get(), rows.empty() ? &dummy : rows.data(), rows.size(), m.rank == 0);
  flush(m.file.get());
}

void Hdf5Reporter::begin_block(const Block& b) {
  Impl& m = *impl_;
  for (int p = 0; p < 2; ++p) {
    if (!b.runs[static_cast<size_t>(p)]) continue;
    std::string path = Impl::series_path(b, p);
    Impl::Series s;
    s.group = create_group(m.run.get(), path);
    nlohmann::ordered_json a = {{"collective", b.collective}, {"dtype", b.dtype}, {"redop", b.redop},
                                {"placement", name(static_cast<Placement>(p))}, {"group", b.group},
                                {"group_size", b.group_size}, {"groups", b.groups}, {"bus_factor", b.bus_factor}, {"root", b.root},
                                {"timing", b.timing}, {"iters", b.iters}, {"warmup", b.warmup}};
    write_attrs(s.group.get(), a);
    s.sizes = std::make_unique<AppendTable>(s.group.get(), "sizes", m.size_t_.get(), sizeof(SizeRow));
    s.samples = std::make_unique<SampleCube>(s.group.get(), "samples", static_cast<hsize_t>(b.iters),
                                             static_cast<hsize_t>(m.size));
    s.summary = std::make_unique<AppendTable>(s.group.get(), "summary", m.summary_t_.get(), sizeof(SummaryRow));
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
    it->second.sizes->append(&sr, m.rank == 0);
    it->second.samples->append(pt.my_samples, m.rank);
    SummaryRow sum{};
    sum.bytes = r.sizes.bytes;
    sum.count = r.sizes.count;
    put(sum.dtype, b.dtype);
    put(sum.redop, b.redop);
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
    it->second.summary->append(&sum, m.rank == 0);
    it->second.group_t_median->append(pt.group_t_median, m.rank == 0);
  }
  flush(m.file.get());
}

void Hdf5Reporter::end_block(const Block& b) {
  for (int p = 0; p < 2; ++p) impl_->series.erase(Impl::series_path(b, p));
}

void Hdf5Reporter::finish(RunStatus s) {
  Impl& m = *impl_;
  if (!m.run.get() || m.run.get() < 0) return;
  write_attr(m.run.get(), "status", name(s));
  // Attribute values must agree on every rank: take rank 0's clock.
  char end[32] = {};
  if (m.rank == 0) put(end, utc_now_iso());
  MPI_Bcast(end, sizeof end, MPI_CHAR, 0, m.world);
  write_attr(m.run.get(), "end_time", std::string(end));
  m.series.clear();
  flush(m.file.get());
}

}  // namespace meshbench::results
