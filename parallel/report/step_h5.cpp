#include "report/step_h5.hpp"

#include <cmath>
#include <cstring>
#include <span>

#include "core/error.hpp"

#include "results/h5.hpp"
#include "results/run_file.hpp"

namespace meshbench::parallel {

using results::H5Id;
using results::h5_check;

namespace {

// A table of rows (an empty one when there are none).
template <typename T>
void write_rows(hid_t loc, const char* name, hid_t type, const std::vector<T>& rows) {
  results::write_table(loc, name, type, rows.data(), rows.size());
}

struct CheckRowH5 {
  char quantity[64];
  double max_abs, rel, tolerance;
  uint8_t pass;
};
struct OpRowH5 {
  char op[24];
  double seconds;
};

}  // namespace

struct StepH5::Impl {
  std::unique_ptr<results::RunFile> file;
  size_t n_phases = 0;
  int ranks = 1;
  H5Id step;
  std::unique_ptr<results::AppendMatrix> step_times, phases, loss;
};

StepH5::StepH5(const std::string& path, bool append, results::RunContext& ctx, int ranks,
               const nlohmann::ordered_json& step_attrs, std::vector<std::string> phase_names,
               const std::vector<results::GroupInfo>& groups)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.file = std::make_unique<results::RunFile>(path, append, ctx);
  m.ranks = ranks;
  m.n_phases = phase_names.size();
  m.file->begin(ctx, groups);
  m.step = results::create_group(m.file->run(), "step");
  results::write_attrs(m.step.get(), step_attrs);
  nlohmann::ordered_json names = phase_names;
  results::write_attr(m.step.get(), "phase_names", names);
  const auto R = static_cast<hsize_t>(ranks);
  constexpr hsize_t kChunk = 64;  // steps per chunk
  m.step_times = std::make_unique<results::AppendMatrix>(m.step.get(), "step_times", std::vector<hsize_t>{R}, kChunk);
  m.phases = std::make_unique<results::AppendMatrix>(m.step.get(), "phases",
                                                     std::vector<hsize_t>{R, phase_names.size()}, kChunk);
  m.loss = std::make_unique<results::AppendMatrix>(m.step.get(), "loss", std::vector<hsize_t>{}, kChunk);
  m.file->publish(true);
}

StepH5::~StepH5() = default;

void StepH5::step(const StepPoint& p) {
  Impl& m = *impl_;
  m.step_times->append(std::span<const double>(p.times));
  m.phases->append(std::span<const double>(p.phases));
  m.loss->append(std::span<const double>(&p.loss, 1));
  m.file->publish();
}

void StepH5::record(const StepRecord& r) {
  write_memory(r.memory_cells);
  write_comm(r.comm);
  write_time_split(r.split);
  write_check(r.check_rows);
  write_summary(r.summary);
  if (r.predicted.on) write_predicted(r.predicted);
  if (!r.op_profile.empty()) write_op_profile(r.op_profile);
  write_events(r.events);
  if (!r.pipeline.empty()) write_pipeline(r.pipeline, r.slots, r.passes);
  nlohmann::ordered_json attrs = {{"clock_offset_error_max_s", r.clock_error_max}};
  if (r.moe.on)
    attrs.update({{"moe_assignments", double(r.moe.routed)}, {"moe_dropped", double(r.moe.dropped)},
                  {"moe_drop_fraction", r.moe.drop_fraction()}, {"moe_worst_expert_rows", double(r.moe.worst_expert)}});
  attrs.update(ep_attributes(r.ep));
  if (!r.diverged.empty()) attrs["diverged"] = r.diverged;
  add_step_attrs(attrs);
}

const std::string& StepH5::error() const { return impl_->file->error(); }

void StepH5::write_memory(const std::vector<MemoryCell>& rows) {
  results::Compound<MemoryCell> t;
  t.add("rank", &MemoryCell::rank).add("category", &MemoryCell::category);
  t.add("measured_bytes", &MemoryCell::measured_bytes).add("analytic_bytes", &MemoryCell::analytic_bytes);
  write_rows(impl_->step.get(), "memory", t.id(), rows);
}

void StepH5::write_comm(const std::vector<CommRow>& rows) {
  results::Compound<CommRow> ct;
  ct.add("rank", &CommRow::rank).add("dim", &CommRow::dim).add("kind", &CommRow::kind);
  ct.add("calls", &CommRow::calls).add("bytes", &CommRow::bytes).add("wire_bytes", &CommRow::wire_bytes);
  ct.add("busy_s", &CommRow::busy_s).add("exposed_s", &CommRow::exposed_s);
  write_rows(impl_->step.get(), "comm", ct.id(), rows);
}

void StepH5::write_time_split(const std::vector<SplitRow>& rows) {
  results::Compound<SplitRow> t;
  t.add("rank", &SplitRow::rank).add("category", &SplitRow::category).add("seconds", &SplitRow::seconds);
  write_rows(impl_->step.get(), "time_split", t.id(), rows);
}

void StepH5::write_check(const std::vector<CheckRow>& rows) {
  results::Compound<CheckRowH5> t;
  t.add("quantity", &CheckRowH5::quantity).add("max_abs", &CheckRowH5::max_abs).add("rel", &CheckRowH5::rel);
  t.add("tolerance", &CheckRowH5::tolerance).add("pass", &CheckRowH5::pass);
  std::vector<CheckRowH5> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    results::put_fixed(out[i].quantity, rows[i].quantity);
    out[i].max_abs = rows[i].max_abs;
    out[i].rel = rows[i].rel;
    out[i].tolerance = rows[i].tolerance;
    out[i].pass = rows[i].pass ? 1 : 0;
  }
  write_rows(impl_->step.get(), "check", t.id(), out);
}

void StepH5::write_op_profile(const std::vector<std::pair<std::string, double>>& ops) {
  results::Compound<OpRowH5> t;
  t.add("op", &OpRowH5::op).add("seconds_per_step", &OpRowH5::seconds);
  std::vector<OpRowH5> out(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    results::put_fixed(out[i].op, ops[i].first);
    out[i].seconds = ops[i].second;
  }
  write_rows(impl_->step.get(), "op_profile", t.id(), out);
}

void StepH5::write_summary(const StepSummary& s) {
  struct Row {
    double step_time_median, step_time_min, step_time_p99, tokens_per_s, flops_per_step,
        model_flops_per_s, peak_measured_flops, mfu_measured_peak, peak_datasheet_flops,
        mfu_datasheet, bubble_measured, bubble_theory, exposed_comm_fraction, loss_first,
        loss_last, exposed_comm_fraction_dp, dp_wire_bytes, dp_wire_bytes_analytic;
    int32_t straggler_rank;
    char check[8];
    uint8_t bytes_match;
  } r{};
  r.exposed_comm_fraction_dp = s.exposed_dp;
  r.dp_wire_bytes = s.dp_wire_bytes;
  r.dp_wire_bytes_analytic = s.dp_wire_bytes_analytic;
  r.bytes_match = s.bytes_match ? 1 : 0;
  r.step_time_median = s.step_time_median;
  r.step_time_min = s.step_time_min;
  r.step_time_p99 = s.step_time_p99;
  r.tokens_per_s = s.tokens_per_s;
  r.flops_per_step = s.flops_per_step;
  r.model_flops_per_s = s.model_flops_per_s;
  r.peak_measured_flops = s.peak_measured_flops;
  r.mfu_measured_peak = s.mfu_measured_peak;
  r.peak_datasheet_flops = s.peak_datasheet_flops;
  r.mfu_datasheet = s.mfu_datasheet;
  r.bubble_measured = s.bubble_measured;
  r.bubble_theory = s.bubble_theory;
  r.exposed_comm_fraction = s.exposed_comm_fraction;
  r.loss_first = s.loss_first;
  r.loss_last = s.loss_last;
  r.straggler_rank = s.straggler_rank;
  results::put_fixed(r.check, s.check);
  results::Compound<Row> t;
#define MB_F(f) t.add(#f, &Row::f)
  MB_F(step_time_median); MB_F(step_time_min); MB_F(step_time_p99); MB_F(tokens_per_s);
  MB_F(flops_per_step); MB_F(model_flops_per_s); MB_F(peak_measured_flops);
  MB_F(mfu_measured_peak); MB_F(peak_datasheet_flops); MB_F(mfu_datasheet);
  MB_F(bubble_measured); MB_F(bubble_theory); MB_F(exposed_comm_fraction); MB_F(loss_first);
  MB_F(loss_last); MB_F(exposed_comm_fraction_dp); MB_F(dp_wire_bytes); MB_F(dp_wire_bytes_analytic);
  MB_F(bytes_match); MB_F(straggler_rank); MB_F(check);
#undef MB_F
  results::write_table(impl_->step.get(), "summary", t.id(), &r, 1);
}

void StepH5::write_events(const std::vector<EventRow>& rows) {
  using R = EventRow;
  results::Compound<R> t;
  t.add("rank", &R::rank).add("step", &R::step).add("microbatch", &R::microbatch).add("chunk", &R::chunk);
  t.add("layer", &R::layer).add("kind", &R::kind).add("dim", &R::dim).add("phase", &R::phase);
  t.add("group", &R::group).add("bytes", &R::bytes).add("flops", &R::flops).add("t_post", &R::t_post);
  t.add("t_start", &R::t_start).add("t_end", &R::t_end).add("name", &R::name);
  t.add("m", &R::m).add("n", &R::n).add("k", &R::k).add("t_posted", &R::t_posted).add("t_wait", &R::t_wait);
  write_rows(impl_->step.get(), "events", t.id(), rows);
}

void StepH5::write_pipeline(const std::vector<PipelineRow>& rows, const std::vector<SlotRow>& slots,
                            const std::vector<PassRow>& passes) {
  hid_t loc = impl_->step.get();
  results::Compound<PipelineRow> pt;
  pt.add("rank", &PipelineRow::rank).add("peak_held", &PipelineRow::peak_held);
  pt.add("peak_activation_bytes", &PipelineRow::peak_activation_bytes);
  pt.add("bubble", &PipelineRow::bubble).add("bubble_theory", &PipelineRow::bubble_theory);
  pt.add("recv_wait_s", &PipelineRow::recv_wait_s).add("recv_transfer_s", &PipelineRow::recv_transfer_s);
  write_rows(loc, "pipeline", pt.id(), rows);
  results::Compound<SlotRow> st;
  st.add("rank", &SlotRow::rank).add("step", &SlotRow::step).add("held", &SlotRow::held);
  st.add("bytes", &SlotRow::bytes).add("t", &SlotRow::t);
  write_rows(loc, "activation_slots", st.id(), slots);
  results::Compound<PassRow> ps;
  ps.add("rank", &PassRow::rank).add("step", &PassRow::step).add("microbatch", &PassRow::microbatch);
  ps.add("chunk", &PassRow::chunk).add("phase", &PassRow::phase);
  ps.add("t_start", &PassRow::t_start).add("t_end", &PassRow::t_end);
  write_rows(loc, "passes", ps.id(), passes);
}

void StepH5::write_predicted(const PredictedRecord& p) {
  H5Id g = results::create_group(impl_->step.get(), "predicted");
  results::write_attrs(g.get(), nlohmann::ordered_json{{"step_time_s", p.step_time_s},
                                                       {"tokens_per_s", p.tokens_per_s},
                                                       {"bubble", p.bubble},
                                                       {"extrapolated", p.extrapolated ? 1 : 0},
                                                       {"extrapolated_what", p.extrapolated_what},
                                                       {"calibration", p.calibration},
                                                       {"fabric", p.fabric},
                                                       {"notes", p.notes}});
  results::Compound<PredictedExposed> e;
  e.add("dim", &PredictedExposed::dim).add("seconds", &PredictedExposed::seconds);
  write_rows(g.get(), "exposed", e.id(), p.exposed);
  results::Compound<PredictedRankRow> r;
  r.add("rank", &PredictedRankRow::rank).add("step_time_s", &PredictedRankRow::step_time_s);
  r.add("compute_s", &PredictedRankRow::compute_s).add("bubble_s", &PredictedRankRow::bubble_s);
  r.add("exposed_s", &PredictedRankRow::exposed_s);
  write_rows(g.get(), "per_rank", r.id(), p.per_rank);
}

void StepH5::add_step_attrs(const nlohmann::ordered_json& attrs) {
  results::write_attrs(impl_->step.get(), attrs);
}

void StepH5::finish(results::RunStatus s) { impl_->file->finish(s); }

}  // namespace meshbench::parallel
