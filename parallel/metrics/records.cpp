#include "metrics/records.hpp"

#include "results/h5.hpp"  // put_fixed

namespace meshbench::parallel {

std::vector<MemoryCell> memory_cells(const std::vector<MemoryRow>& rows, int rank) {
  std::vector<MemoryCell> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    out[i].rank = rank;
    results::put_fixed(out[i].category, rows[i].category);
    out[i].measured_bytes = rows[i].measured_bytes;
    out[i].analytic_bytes = rows[i].analytic_bytes;
  }
  return out;
}

std::vector<EventRow> event_rows(const Trace& tr, int rank, double t_origin, double offset) {
  std::vector<EventRow> rows;
  rows.reserve(tr.ops.size() + tr.comms.size());
  auto t = [&](double x) { return x - offset - t_origin; };  // local clock -> rank 0's
  for (const OpEvent& e : tr.ops) {
    EventRow r{};
    r.rank = rank;
    r.step = e.step;
    r.microbatch = e.micro;
    r.layer = e.layer;
    r.chunk = e.chunk;
    const char* ph = e.phase == 'F' ? "fwd" : (e.phase == 'B' ? "bwd" : "opt");
    results::put_fixed(r.kind, std::string(op_name(e.op)) + "." + ph);
    const std::string role = e.role, part = e.part;
    results::put_fixed(r.name, role.empty() ? part : (part.empty() ? role : role + "." + part));
    r.m = e.m;
    r.n = e.n;
    r.k = e.k;
    results::put_fixed(r.dim, "-");
    results::put_fixed(r.phase, std::string(1, e.phase));
    r.group = -1;
    r.flops = e.flops;
    r.t_post = r.t_start = t(e.t_start);
    r.t_end = r.t_wait = t(e.t_end);
    r.t_posted = r.t_start;
    rows.push_back(r);
  }
  for (const CommEvent& e : tr.comms) {
    EventRow r{};
    r.rank = rank;
    r.step = e.tags.step;
    r.microbatch = e.tags.micro;
    r.layer = e.tags.layer;
    r.chunk = e.tags.chunk;
    results::put_fixed(r.kind, comm_kind(e));
    results::put_fixed(r.dim, e.dim);
    results::put_fixed(r.phase, std::string(1, e.tags.phase));
    r.group = e.group;
    r.bytes = e.bytes;
    r.t_post = t(e.t_post);
    r.t_start = t(e.t_start);
    r.t_end = t(e.t_end);
    r.t_wait = t(e.t_wait);
    r.t_posted = t(e.blocking ? e.t_start : e.t_posted);
    rows.push_back(r);
  }
  return rows;
}

std::vector<SlotRow> slot_rows(const Trace& tr, int rank, double t_origin, double offset) {
  std::vector<SlotRow> v;
  for (const SlotSample& s : tr.slots) v.push_back({rank, s.step, s.held, s.bytes, s.t - offset - t_origin});
  return v;
}

std::vector<PassRow> pass_rows(const Trace& tr, int rank, double t_origin, double offset) {
  std::vector<PassRow> v;
  for (const PassSpan& p : tr.passes) {
    PassRow r{rank, p.step, p.micro, p.chunk, {p.phase, 0, 0, 0}, p.t0 - offset - t_origin, p.t1 - offset - t_origin};
    v.push_back(r);
  }
  for (const CommEvent& e : tr.comms)  // the pipeline's sends 'S' and receives 'R', posted to completion
    if (e.p2p != 0) {
      PassRow r{rank, e.tags.step, e.tags.micro, e.tags.chunk, {e.p2p == 's' ? 'S' : 'R', 0, 0, 0},
                e.t_post - offset - t_origin, e.t_end - offset - t_origin};
      v.push_back(r);
    }
  return v;
}

}  // namespace meshbench::parallel
