#include "results/run_file.hpp"

#include <fmt/core.h>

#include "core/error.hpp"
#include "core/timer.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace meshbench::results {
namespace {


struct RankRow {
  std::int32_t rank;
  char host[64];
  std::int32_t node, local_rank;
  char cores[64], device[32], gpus[64], nics[64];
};

struct GroupRow {
  char dim[16];
  std::int32_t id, size;
  char ranks[256];
  std::int32_t nodes_spanned;
  char span[8];
};
Compound<RankRow> rank_type() {
  Compound<RankRow> t;
  t.add("rank", &RankRow::rank).add("host", &RankRow::host).add("node", &RankRow::node);
  t.add("local_rank", &RankRow::local_rank).add("cores", &RankRow::cores).add("device", &RankRow::device);
  t.add("gpus", &RankRow::gpus).add("nics", &RankRow::nics);
  return t;
}

Compound<GroupRow> group_type() {
  Compound<GroupRow> t;
  t.add("dim", &GroupRow::dim).add("id", &GroupRow::id).add("size", &GroupRow::size).add("ranks", &GroupRow::ranks);
  t.add("nodes_spanned", &GroupRow::nodes_spanned).add("span", &GroupRow::span);
  return t;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';  // two appends: GCC 12 warns (-Wrestrict, falsely) on "," + string
    s += std::to_string(v[i]);
  }
  if (s.size() > 255) s = s.substr(0, 252) + "...";
  return s;
}

}  // namespace

RunFile::RunFile(const std::string& path, bool append, RunContext& ctx) : file_(path, append) {
  appended_ = append;
  hid_t f = file_.id();
  if (!append || !exists(f, "runs")) {
    write_attr(f, "schema_version", kSchemaVersion);
    write_attr(f, "suite_version", suite_version());
    write_attr(f, "git_sha", git_sha());
  }
  std::string id = ctx.run_id;
  for (int k = 2; exists(f, "runs/" + id); ++k) id = ctx.run_id + "-" + std::to_string(k);
  ctx.run_id = id;
  ctx.attrs["run_id"] = id;
}

void RunFile::begin(const RunContext& ctx, const std::vector<GroupInfo>& groups) {
  run_ = create_group(file_.id(), "runs/" + ctx.run_id);
  write_attrs(run_.get(), ctx.attrs);
  write_topology(run_.get(), ctx.topology, groups);
  publish(true);
}

bool RunFile::publish(bool force) {
  if (!error_.empty()) return false;
  const double now = core::now_seconds();
  // Due when the time since the last publish is at least 9x what that publish cost: at most
  // a tenth of the wall time goes to publishing, however large the file grows.
  if (!force && now - last_end_ < 9 * last_cost_) return true;
  const double before = file_.publish_seconds();
  hold_error(file_.publish(/*durable=*/false));
  last_cost_ = file_.publish_seconds() - before;
  last_end_ = core::now_seconds();
  return error_.empty();
}

void RunFile::hold_error(const std::string& why) {
  if (!error_.empty() || why.empty()) return;
  // Say what the file on disk now holds: the last publish, or nothing of this run.
  const int kept = file_.publishes() - 1;  // the one that failed is counted
  error_ = kept > 0 ? fmt::format("{}; {} keeps its last complete state, published {:.1f} s before (this run's "
                                  "status stays 'running': its end could not be recorded)",
                                  why, file_.path(), core::now_seconds() - last_end_)
           : appended_ ? fmt::format("{}; {} is unchanged (it does not hold this run)", why, file_.path())
                       : fmt::format("{}; {} was not created", why, file_.path());
}

void RunFile::finish(const std::string& status) {
  if (run_.get() < 0 || !error_.empty()) return;
  write_attr(run_.get(), "status", status);
  write_attr(run_.get(), "end_time", utc_now_iso());
  // What keeping the file whole on disk cost (MemFile): publishes and their seconds, this one excluded.
  write_attr(run_.get(), "results_publishes", file_.publishes() + 1);
  write_attr(run_.get(), "results_publish_s", file_.publish_seconds());
  h5_check(H5Fflush(file_.id(), H5F_SCOPE_GLOBAL), "H5Fflush", file_.path());
  hold_error(file_.publish(/*durable=*/true));
}

bool mark_status_alone(const std::string& path, const std::string& run_id, const std::string& status) {
  H5E_auto2_t func = nullptr;
  void* data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &func, &data);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  bool ok = false;
  {
    H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_fapl_sec2(fapl.get());
    H5Id f(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose);
    std::string where = "runs/" + run_id;
    if (f.get() >= 0 && H5Lexists(f.get(), "runs", H5P_DEFAULT) > 0 && H5Lexists(f.get(), where.c_str(), H5P_DEFAULT) > 0) {
      H5Id run(H5Gopen2(f.get(), where.c_str(), H5P_DEFAULT), H5Gclose);
      try {
        write_attr(run.get(), "status", status);
        write_attr(run.get(), "end_time", utc_now_iso());
        ok = H5Fflush(f.get(), H5F_SCOPE_GLOBAL) >= 0;
      } catch (const std::exception&) {
        ok = false;
      }
    }
  }
  H5Eset_auto2(H5E_DEFAULT, func, data);
  return ok;
}

void write_topology(hid_t run, const comm::Topology& topo, const std::vector<GroupInfo>& groups) {
  H5Id g = create_group(run, "topology");
  write_attr(g.get(), "nodes_emulated", topo.emulated);
  std::vector<RankRow> ranks(topo.ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto& p = topo.ranks[i];
    ranks[i].rank = p.rank;
    put_fixed(ranks[i].host, p.host);
    ranks[i].node = p.node;
    ranks[i].local_rank = p.local_rank;
    put_fixed(ranks[i].cores, p.cores);
    put_fixed(ranks[i].device, p.device);
    put_fixed(ranks[i].gpus, p.gpus);
    put_fixed(ranks[i].nics, p.nics);
  }
  write_table(g.get(), "ranks", rank_type().id(), ranks.data(), ranks.size());
  std::vector<GroupRow> rows(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    put_fixed(rows[i].dim, groups[i].dim);
    rows[i].id = groups[i].id;
    rows[i].size = static_cast<std::int32_t>(groups[i].ranks.size());
    put_fixed(rows[i].ranks, join(groups[i].ranks));
    rows[i].nodes_spanned = groups[i].nodes_spanned;
    put_fixed(rows[i].span, groups[i].span);
  }
  write_table(g.get(), "groups", group_type().id(), rows.data(), rows.size());

  // The full member lists, since the ranks string is cut at 255 characters: int32
  // [n_groups, largest group], padded with -1.
  std::size_t width = 1;
  for (const auto& gi : groups) width = std::max(width, gi.ranks.size());
  std::vector<std::int32_t> members(groups.size() * width, -1);
  for (size_t i = 0; i < groups.size(); ++i)
    for (size_t j = 0; j < groups[i].ranks.size(); ++j) members[i * width + j] = groups[i].ranks[j];
  hsize_t dims[2] = {groups.size(), width};
  H5Id space(H5Screate_simple(2, dims, nullptr), H5Sclose);
  H5Id dset(h5_check(H5Dcreate2(g.get(), "group_members", H5T_NATIVE_INT32, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                H5P_DEFAULT),
                     "H5Dcreate", "group_members"),
            H5Dclose);
  if (!groups.empty())
    h5_check(H5Dwrite(dset.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, members.data()), "H5Dwrite",
             "group_members");

}

}  // namespace meshbench::results
