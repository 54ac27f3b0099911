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
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(MemoryCell)), H5Tclose);
  H5Id s24 = results::string_type(24);
  H5Tinsert(t.get(), "rank", HOFFSET(MemoryCell, rank), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "category", HOFFSET(MemoryCell, category), s24.get());
  H5Tinsert(t.get(), "measured_bytes", HOFFSET(MemoryCell, measured_bytes), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "analytic_bytes", HOFFSET(MemoryCell, analytic_bytes), H5T_NATIVE_DOUBLE);
  write_rows(impl_->step.get(), "memory", t.get(), rows);
}

void StepH5::write_comm(const std::vector<CommRow>& rows) {
  H5Id ct(H5Tcreate(H5T_COMPOUND, sizeof(CommRow)), H5Tclose);
  H5Id s16 = results::string_type(16), s24 = results::string_type(24);
  H5Tinsert(ct.get(), "rank", HOFFSET(CommRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(ct.get(), "dim", HOFFSET(CommRow, dim), s16.get());
  H5Tinsert(ct.get(), "kind", HOFFSET(CommRow, kind), s24.get());
  H5Tinsert(ct.get(), "calls", HOFFSET(CommRow, calls), H5T_NATIVE_UINT64);
  H5Tinsert(ct.get(), "bytes", HOFFSET(CommRow, bytes), H5T_NATIVE_UINT64);
  H5Tinsert(ct.get(), "wire_bytes", HOFFSET(CommRow, wire_bytes), H5T_NATIVE_DOUBLE);
  H5Tinsert(ct.get(), "busy_s", HOFFSET(CommRow, busy_s), H5T_NATIVE_DOUBLE);
  H5Tinsert(ct.get(), "exposed_s", HOFFSET(CommRow, exposed_s), H5T_NATIVE_DOUBLE);
  write_rows(impl_->step.get(), "comm", ct.get(), rows);
}

void StepH5::write_time_split(const std::vector<SplitRow>& rows) {
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(SplitRow)), H5Tclose);
  H5Id s24 = results::string_type(24);
  H5Tinsert(t.get(), "rank", HOFFSET(SplitRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "category", HOFFSET(SplitRow, category), s24.get());
  H5Tinsert(t.get(), "seconds", HOFFSET(SplitRow, seconds), H5T_NATIVE_DOUBLE);
  write_rows(impl_->step.get(), "time_split", t.get(), rows);
}

void StepH5::write_check(const std::vector<CheckRow>& rows) {
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(CheckRowH5)), H5Tclose);
  H5Id s64 = results::string_type(64);
  H5Tinsert(t.get(), "quantity", HOFFSET(CheckRowH5, quantity), s64.get());
  H5Tinsert(t.get(), "max_abs", HOFFSET(CheckRowH5, max_abs), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "rel", HOFFSET(CheckRowH5, rel), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "tolerance", HOFFSET(CheckRowH5, tolerance), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "pass", HOFFSET(CheckRowH5, pass), H5T_NATIVE_UINT8);
  std::vector<CheckRowH5> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    results::put_fixed(out[i].quantity, rows[i].quantity);
    out[i].max_abs = rows[i].max_abs;
    out[i].rel = rows[i].rel;
    out[i].tolerance = rows[i].tolerance;
    out[i].pass = rows[i].pass ? 1 : 0;
  }
  write_rows(impl_->step.get(), "check", t.get(), out);
}

void StepH5::write_op_profile(const std::vector<std::pair<std::string, double>>& ops) {
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(OpRowH5)), H5Tclose);
  H5Id s24 = results::string_type(24);
  H5Tinsert(t.get(), "op", HOFFSET(OpRowH5, op), s24.get());
  H5Tinsert(t.get(), "seconds_per_step", HOFFSET(OpRowH5, seconds), H5T_NATIVE_DOUBLE);
  std::vector<OpRowH5> out(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    results::put_fixed(out[i].op, ops[i].first);
    out[i].seconds = ops[i].second;
  }
  write_rows(impl_->step.get(), "op_profile", t.get(), out);
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
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(Row)), H5Tclose);
#define MB_F(f) H5Tinsert(t.get(), #f, HOFFSET(Row, f), H5T_NATIVE_DOUBLE)
  MB_F(step_time_median); MB_F(step_time_min); MB_F(step_time_p99); MB_F(tokens_per_s);
  MB_F(flops_per_step); MB_F(model_flops_per_s); MB_F(peak_measured_flops);
  MB_F(mfu_measured_peak); MB_F(peak_datasheet_flops); MB_F(mfu_datasheet);
  MB_F(bubble_measured); MB_F(bubble_theory); MB_F(exposed_comm_fraction); MB_F(loss_first);
  MB_F(loss_last); MB_F(exposed_comm_fraction_dp); MB_F(dp_wire_bytes); MB_F(dp_wire_bytes_analytic);
#undef MB_F
  H5Tinsert(t.get(), "bytes_match", HOFFSET(Row, bytes_match), H5T_NATIVE_UINT8);
  H5Tinsert(t.get(), "straggler_rank", HOFFSET(Row, straggler_rank), H5T_NATIVE_INT32);
  H5Id s8 = results::string_type(8);
  H5Tinsert(t.get(), "check", HOFFSET(Row, check), s8.get());
  results::write_table(impl_->step.get(), "summary", t.get(), &r, 1);
}

void StepH5::write_events(const std::vector<EventRow>& rows) {
  H5Id t(H5Tcreate(H5T_COMPOUND, sizeof(EventRow)), H5Tclose);
  H5Id s24 = results::string_type(24), s16 = results::string_type(16), s4 = results::string_type(4);
  H5Tinsert(t.get(), "rank", HOFFSET(EventRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "step", HOFFSET(EventRow, step), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "microbatch", HOFFSET(EventRow, microbatch), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "chunk", HOFFSET(EventRow, chunk), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "layer", HOFFSET(EventRow, layer), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "kind", HOFFSET(EventRow, kind), s24.get());
  H5Tinsert(t.get(), "dim", HOFFSET(EventRow, dim), s16.get());
  H5Tinsert(t.get(), "phase", HOFFSET(EventRow, phase), s4.get());
  H5Tinsert(t.get(), "group", HOFFSET(EventRow, group), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "bytes", HOFFSET(EventRow, bytes), H5T_NATIVE_UINT64);
  H5Tinsert(t.get(), "flops", HOFFSET(EventRow, flops), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "t_post", HOFFSET(EventRow, t_post), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "t_start", HOFFSET(EventRow, t_start), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "t_end", HOFFSET(EventRow, t_end), H5T_NATIVE_DOUBLE);
  H5Id s32 = results::string_type(32);
  H5Tinsert(t.get(), "name", HOFFSET(EventRow, name), s32.get());
  H5Tinsert(t.get(), "m", HOFFSET(EventRow, m), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "n", HOFFSET(EventRow, n), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "k", HOFFSET(EventRow, k), H5T_NATIVE_INT32);
  H5Tinsert(t.get(), "t_posted", HOFFSET(EventRow, t_posted), H5T_NATIVE_DOUBLE);
  H5Tinsert(t.get(), "t_wait", HOFFSET(EventRow, t_wait), H5T_NATIVE_DOUBLE);
  write_rows(impl_->step.get(), "events", t.get(), rows);
}

void StepH5::write_pipeline(const std::vector<PipelineRow>& rows, const std::vector<SlotRow>& slots,
                            const std::vector<PassRow>& passes) {
  hid_t loc = impl_->step.get();
  H5Id pt(H5Tcreate(H5T_COMPOUND, sizeof(PipelineRow)), H5Tclose);
  H5Tinsert(pt.get(), "rank", HOFFSET(PipelineRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(pt.get(), "peak_held", HOFFSET(PipelineRow, peak_held), H5T_NATIVE_INT32);
  H5Tinsert(pt.get(), "peak_activation_bytes", HOFFSET(PipelineRow, peak_activation_bytes), H5T_NATIVE_INT64);
#define MB_F(f) H5Tinsert(pt.get(), #f, HOFFSET(PipelineRow, f), H5T_NATIVE_DOUBLE)
  MB_F(bubble); MB_F(bubble_theory); MB_F(recv_wait_s); MB_F(recv_transfer_s);
#undef MB_F
  write_rows(loc, "pipeline", pt.get(), rows);
  H5Id st(H5Tcreate(H5T_COMPOUND, sizeof(SlotRow)), H5Tclose);
  H5Tinsert(st.get(), "rank", HOFFSET(SlotRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(st.get(), "step", HOFFSET(SlotRow, step), H5T_NATIVE_INT32);
  H5Tinsert(st.get(), "held", HOFFSET(SlotRow, held), H5T_NATIVE_INT32);
  H5Tinsert(st.get(), "bytes", HOFFSET(SlotRow, bytes), H5T_NATIVE_INT64);
  H5Tinsert(st.get(), "t", HOFFSET(SlotRow, t), H5T_NATIVE_DOUBLE);
  write_rows(loc, "activation_slots", st.get(), slots);
  H5Id ps(H5Tcreate(H5T_COMPOUND, sizeof(PassRow)), H5Tclose);
  H5Id s4 = results::string_type(4);
  H5Tinsert(ps.get(), "rank", HOFFSET(PassRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(ps.get(), "step", HOFFSET(PassRow, step), H5T_NATIVE_INT32);
  H5Tinsert(ps.get(), "microbatch", HOFFSET(PassRow, microbatch), H5T_NATIVE_INT32);
  H5Tinsert(ps.get(), "chunk", HOFFSET(PassRow, chunk), H5T_NATIVE_INT32);
  H5Tinsert(ps.get(), "phase", HOFFSET(PassRow, phase), s4.get());
  H5Tinsert(ps.get(), "t_start", HOFFSET(PassRow, t_start), H5T_NATIVE_DOUBLE);
  H5Tinsert(ps.get(), "t_end", HOFFSET(PassRow, t_end), H5T_NATIVE_DOUBLE);
  write_rows(loc, "passes", ps.get(), passes);
}

void StepH5::add_step_attrs(const nlohmann::ordered_json& attrs) {
  results::write_attrs(impl_->step.get(), attrs);
}

void StepH5::finish(results::RunStatus s) { impl_->file->finish(s); }

}  // namespace meshbench::parallel
