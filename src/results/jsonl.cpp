// JSON-lines summary beside the HDF5 file: one object per measured point, flushed per line.
#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "results/reporter.hpp"

namespace meshbench::results {

JsonLinesReporter::~JsonLinesReporter() {
  if (file_) std::fclose(file_);
}

// The file is opened at the first row, not here: a run whose results file could not be
// created (a full disk at the first publish) leaves no empty FILE.jsonl behind.
void JsonLinesReporter::begin_run(const RunContext& ctx, const std::vector<GroupInfo>&) {
  const auto& a = ctx.attrs;
  base_ = {{"run_id", ctx.run_id},       {"binary", a.value("binary", "")},
           {"tag", a.value("tag", "")},  {"backend", a.value("backend", "")},
           {"mem", a.value("mem", "")},  {"timing", a.value("timing", "")},
           {"world_size", a.value("world_size", 0)}, {"nodes", a.value("nodes", 0)},
           {"oversubscribed", a.value("oversubscribed", false)}};
}

void JsonLinesReporter::row(const Block& b, const Row& r) {
  if (!error_.empty()) return;
  if (!file_) file_ = std::fopen(path_.c_str(), "a");
  if (!file_) {
    error_ = "cannot open " + path_ + ": " + std::strerror(errno);
    return;
  }
  for (int p = 0; p < 2; ++p) {
    const PointResult& pt = r.by_placement[static_cast<size_t>(p)];
    if (!pt.ran) continue;
    nlohmann::ordered_json j = base_;
    j["collective"] = b.collective;
    j["group"] = b.group;
    j["dtype"] = b.dtype;
    j["redop"] = b.redop;
    j["placement"] = name(static_cast<Placement>(p));
    j["root"] = b.root;
    j["bytes"] = r.sizes.bytes;
    j["count"] = r.sizes.count;
    j["send_bytes_per_rank"] = r.sizes.send_bytes_per_rank;
    j["recv_bytes_per_rank"] = r.sizes.recv_bytes_per_rank;
    j["total_bytes"] = r.sizes.total_bytes;
    j["t_median"] = pt.t_median;
    j["t_min"] = pt.t_min;
    j["t_mean"] = pt.t_mean;
    j["t_p99"] = pt.t_p99;
    j["t_first"] = pt.t_first;
    j["algbw"] = pt.algbw;
    j["busbw"] = pt.busbw;
    j["wrong"] = pt.wrong;
    j["slowest_rank"] = pt.slowest_rank;
    j["rank_stat"] = b.rank_stat;
    j["t_median_max"] = pt.t_by_stat[0];
    j["t_median_avg"] = pt.t_by_stat[1];
    j["t_median_min"] = pt.t_by_stat[2];
    j["t_median_rank0"] = pt.t_by_stat[3];
    j["iters"] = pt.iters;
    j["warmup_calls"] = pt.warmup_calls;
    j["warmup_converged"] = pt.warmup_converged;
    j["invalid"] = pt.invalid;
    std::string line = j.dump() + "\n";
    std::fputs(line.c_str(), file_);
  }
  if (std::fflush(file_) != 0 || std::ferror(file_)) error_ = "cannot write " + path_ + ": " + std::strerror(errno);
}

}  // namespace meshbench::results
