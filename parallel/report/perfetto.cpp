#include "report/perfetto.hpp"

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

#include <fmt/core.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace meshbench::parallel {

void write_perfetto(const std::string& path, const std::vector<EventRow>& rows,
                    const std::vector<comm::ClockOffset>& offsets,
                    const std::vector<std::string>& hosts, const std::vector<SlotRow>& slots,
                    const std::vector<PassRow>& passes, const std::string& compute_track) {
  nlohmann::json ev = nlohmann::json::array();
  std::map<std::pair<int, std::string>, int> tracks;  // (rank, track name) -> tid
  auto tid = [&](int rank, const std::string& name) {
    auto key = std::make_pair(rank, name);
    auto it = tracks.find(key);
    if (it != tracks.end()) return it->second;
    const int id = static_cast<int>(tracks.size()) + 1;
    tracks.emplace(key, id);
    ev.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", id}, {"args", {{"name", name}}}});
    ev.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", rank}, {"tid", id}, {"args", {{"sort_index", id}}}});
    return id;
  };
  for (size_t r = 0; r < offsets.size(); ++r) {
    const std::string host = r < hosts.size() ? hosts[r] : "?";
    ev.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", r}, {"args",
                  {{"name", fmt::format("rank {} ({}, clock error <= {:.1f} us)", r, host, offsets[r].error_s * 1e6)}}}});
    ev.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", r}, {"args", {{"sort_index", r}}}});
    tid(static_cast<int>(r), compute_track);
  }
  for (const EventRow& e : rows) {
    const std::string dim(e.dim), kind(e.kind);
    const bool is_comm = dim != "-";
    const std::string track = is_comm ? fmt::format("{} group {}", dim, e.group) : compute_track;
    nlohmann::json args = {{"step", e.step}, {"microbatch", e.microbatch}, {"layer", e.layer}, {"phase", e.phase}};
    if (is_comm) {
      args["bytes"] = e.bytes;
      args["posted_us"] = e.t_post * 1e6;
      args["waited_from_us"] = e.t_wait * 1e6;
    } else {
      args["flops"] = e.flops;
      if (e.m > 0) args["gemm_mnk"] = fmt::format("{}x{}x{}", e.m, e.n, e.k);
    }
    const std::string op_name = std::string(e.name, strnlen(e.name, sizeof e.name));
    const std::string label = is_comm ? dim + " " + kind
                                      : (op_name.empty() ? kind
                                                         : (e.m > 0 ? fmt::format("{} {}x{}x{}", op_name, e.m, e.n, e.k)
                                                                    : op_name));
    ev.push_back({{"ph", "X"}, {"name", label}, {"cat", is_comm ? "comm" : "compute"},
                  {"pid", e.rank}, {"tid", tid(e.rank, track)}, {"ts", e.t_start * 1e6},
                  {"dur", (e.t_end - e.t_start) * 1e6}, {"args", args}});
  }
  for (const PassRow& p : passes) {
    if (p.phase[0] != 'F' && p.phase[0] != 'B') continue;  // the sends and receives are on the pp track
    const std::string name = fmt::format("{}{}{}", p.phase, p.microbatch, p.chunk > 0 ? fmt::format("c{}", p.chunk) : "");
    ev.push_back({{"ph", "X"}, {"name", name}, {"cat", "pipeline"}, {"pid", p.rank}, {"tid", tid(p.rank, "pipeline")},
                  {"ts", p.t_start * 1e6}, {"dur", (p.t_end - p.t_start) * 1e6},
                  {"args", {{"step", p.step}, {"microbatch", p.microbatch}, {"chunk", p.chunk}}}});
  }
  for (const SlotRow& sl : slots)
    ev.push_back({{"ph", "C"}, {"name", "stored activations"}, {"pid", sl.rank}, {"ts", sl.t * 1e6},
                  {"args", {{"micro-batches", sl.held}, {"MiB", double(sl.bytes) / (1024.0 * 1024.0)}}}});
  nlohmann::json meta = nlohmann::json::array();
  for (size_t r = 0; r < offsets.size(); ++r)
    meta.push_back({{"rank", r}, {"offset_s", offsets[r].offset_s}, {"error_s", offsets[r].error_s}});
  const nlohmann::json doc = {{"traceEvents", ev}, {"displayTimeUnit", "ms"},
                              {"otherData", {{"generator", "meshbench step_bench"}, {"clock_offsets", meta.dump()}}}};
  std::ofstream f(path);
  if (!f) throw core::RuntimeFault("--trace " + path + ": cannot open for writing: " + std::strerror(errno));
  f << doc.dump() << "\n";
  f.flush();
  if (!f) throw core::RuntimeFault("--trace " + path + ": write failed: " + std::strerror(errno));
}

}  // namespace meshbench::parallel
