"""meshbench.report_steps: scripts/report's step table: one row per step_bench run (strategy,
degrees, micro-batches, step time, tokens/s, MFU, exposed communication, bytes per (dim, kind)
per rank and step, bytes_match, rank 0's peak memory per category), the ZeRO stages side by
side when the runs differ only in that, the per-tensor-parallel-degree table, and the notes
under them (unfinished, oversubscribed, written before step/time_split). Step times are printed
to the precision of the run's spread over its steps (meshbench.spread).
"""
import math

from . import plans, reader, spread
from .report_format import human_bytes

STEP_MD = ["run_id", "strategy", "degrees", "microbatches", "step_time_median", "tokens_per_s",
           "mfu_measured_peak", "exposed_comm_fraction"]
STEP_HEADERS = {"run_id": "run", "microbatches": "m", "step_time_median": "step (ms)",
                "step_time_min": "min (ms)", "step_time_p99": "p99 (ms)", "tokens_per_s": "tokens/s",
                "mfu_measured_peak": "MFU", "mfu_datasheet": "MFU (datasheet)",
                "exposed_comm_fraction": "exposed comm", "bytes_match": "bytes match",
                "mem.total": "memory total (rank 0)", "mem_analytic.total": "analytic total"}


def step_header(col):
    if col in STEP_HEADERS:
        return STEP_HEADERS[col]
    if col.startswith("bytes."):
        _, dim, kind = col.split(".", 2)
        return f"{dim} {kind} (bytes/rank/step)"
    if col.startswith("mem_analytic."):
        return f"{col.split('.', 1)[1]} analytic"
    if col.startswith("mem."):
        return f"{col.split('.', 1)[1]} (rank 0)"
    return col


def step_human(col, v):
    if v is None or v == "":
        return ""
    if isinstance(v, float) and math.isnan(v):
        return "-"
    if col.startswith(("step_time", "time.")):
        return f"{v * 1e3:.3f}"
    if col.startswith("bubble"):
        return f"{100 * v:.1f}%"
    if col == "tokens_per_s":
        return f"{v:,.0f}" if v >= 1000 else f"{v:.3g}"
    if col.startswith("mfu") or col.startswith("exposed"):
        return f"{100 * v:.1f}%"
    if col.startswith(("bytes.", "mem.", "mem_analytic.")) or col in ("mem_peak", "rss_peak"):
        return human_bytes(v)
    if col == "bytes_match":
        return "yes" if v == 1 else "NO"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def run_place_ms(r):
    """The decimal place (ms) of a run's step times: 2 significant digits of its spread over its
    steps (spread.interval: min-max, or the 95% CI of the median from 6 steps on)."""
    lo, hi, _ = spread.interval(r.get("_step_samples") or [])
    med = r.get("step_time_median")
    if math.isnan(lo) or not isinstance(med, float):
        return -3
    return spread.place((hi - lo) * 1e3, med * 1e3)


def run_tokens_cell(r):
    """A run's tokens/s to the precision of its steps' spread (tokens/s x median / hi .. / lo)."""
    t, med = r.get("tokens_per_s"), r.get("step_time_median")
    lo, hi, _ = spread.interval(r.get("_step_samples") or [])
    if not isinstance(t, float) or not isinstance(med, float) or math.isnan(lo) or lo <= 0:
        return step_human("tokens_per_s", t)
    return spread.fmt(t, spread.place(t * med / lo - t * med / hi, t))


def step_cell(c, r):
    """A step table cell; step times to the precision of the run's spread (run_place_ms)."""
    v = r.get(c)
    if c.startswith("step_time") and isinstance(v, float) and not math.isnan(v) and r.get("_step_samples"):
        return spread.fmt(v * 1e3, run_place_ms(r))
    if c == "tokens_per_s":
        return run_tokens_cell(r)
    return step_human(c, v)


def step_columns(steps):
    """Markdown columns: the fixed ones, bytes per (dim, kind), bytes_match, then memory."""
    present = {k for r in steps for k in r}
    byte_cols = sorted(k for k in present if k.startswith("bytes."))
    mem_cols = [f"mem.{c}" for c in reader.MEMORY_CATEGORIES if f"mem.{c}" in present]
    totals = [c for c in ("mem.total", "mem_analytic.total") if c in present]
    return STEP_MD + byte_cols + ["bytes_match"] + mem_cols + totals


def step_all_columns(steps):
    """CSV/JSON columns: every fixed field, then each per-file column in a stable order (not the
    private '_' ones: a run's per-step samples)."""
    fixed = reader.STEP_FIELDS + plans.PLAN_FIELDS
    return fixed + sorted({k for r in steps for k in r if not k.startswith("_")} - set(fixed))


def sort_steps(steps):
    return sorted(steps, key=lambda r: (r.get("zero_stage") or 0, r.get("dp") or 1, r.get("microbatches") or 1,
                                        r.get("start_time", ""), r["run_id"]))


def step_markdown(steps, cols):
    """One row per run; when the runs differ in ZeRO stage, the stages side by side instead
    (one column per run, one row per quantity, memory measured beside its formula)."""
    if len({r.get("zero_stage") for r in steps}) > 1:
        labels = [r.get("strategy") or f"zero{r.get('zero_stage')}" for r in steps]
        labels = [f"{l} #{i + 1}" if labels.count(l) > 1 else l for i, l in enumerate(labels)]
        rows_cols = [c for c in cols if c != "strategy"]
        # memory: measured and analytic next to each other, per category
        out_cols = []
        for c in rows_cols:
            out_cols.append(c)
            if c.startswith("mem.") and any(f"mem_analytic.{c[4:]}" in r for r in steps):
                a = f"mem_analytic.{c[4:]}"
                if c != "mem.total" and any(not math.isnan(r.get(a, math.nan)) for r in steps):
                    out_cols.append(a)
        out = ["| | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(steps)]
        for c in out_cols:
            out.append(f"| {step_header(c)} | " + " | ".join(step_cell(c, r) or "-" for r in steps) + " |")
        return "\n".join(out) + "\n"
    head = [step_header(c) for c in cols]
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---" if c in ("run_id", "strategy", "degrees") else "---:" for c in cols) + "|"]
    out += ["| " + " | ".join(step_cell(c, r) or "-" for c in cols) + " |" for r in steps]
    return "\n".join(out) + "\n"


def unfinished_note(r):
    """What a step run that did not end 'ok' contributes: its summary when it wrote one
    (killed, timeout, diverged, failed: the steps it finished), else nothing but its step times
    (running: the process died before its end; hung)."""
    head = f"run {r['run_id']} ({r.get('plan')}): status '{r.get('status')}'"
    if r.get("tokens_per_s") is None:
        return head + ": it wrote no summary (it ended before its report), so its row has no numbers"
    return head + ": its numbers cover the steps it finished"


def oversubscribed_note(steps):
    """The step runs that had more ranks, or more threads, than cores on a host: their times
    are not meaningful."""
    over = [r for r in steps if r.get("oversubscribed")]
    if not over:
        return []
    return [f"{len(over)} of {len(steps)} run(s) oversubscribed (more ranks, or ranks x threads, than cores on a "
            "host): the table's shape holds, the times are not meaningful"]


def no_split_note(steps):
    """Runs written before step/time_split (issue 23): their split columns are '-'."""
    old = [r for r in steps if r.get("tokens_per_s") is not None and "time.step" not in r]
    if not old:
        return []
    ids = ", ".join(r["run_id"] for r in old[:4]) + (", ..." if len(old) > 4 else "")
    return [f"{len(old)} run(s) written before step/time_split ({ids}): exposed, bubble and the time split read "
            "'-' (the report does not re-derive what the binary did not store; re-run with this build)"]


def modelled_note(steps):
    """Runs made with --compute modelled: their compute was waited, not run."""
    mod = [r for r in steps if r.get("compute") == "modelled"]
    if not mod:
        return []
    return [f"{len(mod)} of {len(steps)} run(s) with MODELLED compute ('[modelled compute]'): every compute action "
            "waited its predicted duration and only the communication ran (docs/modelled.md); their memory is the "
            "analytic figure, not measured"]


def step_notes(steps):
    notes = oversubscribed_note(steps) + modelled_note(steps)
    for r in steps:
        if r.get("bytes_match") == 0:
            notes.append(f"run {r['run_id']}: measured bytes differ from the plan's (bytes_match 0): flagged")
        if r.get("status") != "ok":
            notes.append(unfinished_note(r))
    notes += no_split_note(steps)
    notes.append("step (ms): the median of each step's slowest rank, to 2 significant digits of its steps' spread "
                 "(min-max; 95% CI of the median from 6 steps on); bytes per (dim, kind): payload per rank and step "
                 "(the largest rank's total over the timed steps / steps); memory: rank 0's peak per category "
                 "during the timed steps; total = params + grads + optimizer + activations + buffers")
    return "\n" + "\n".join("- " + n for n in notes) + "\n"


def tp_table(steps):
    """The per-TP-degree table (issue 10): the runs with only data and tensor parallel (no cp,
    pp, ep or ZeRO: the plan table covers those), when they differ in tensor-parallel degree;
    one row per run in order of tp (then AR before SP): step time, TP bytes and exposed TP
    time per rank and step, rank 0's activation memory, the straggler, and whether the TP
    groups cross a node (from topology/groups: --ranks-per-node or the real hosts)."""
    steps = [r for r in steps if r.get("step_time_median") is not None
             and all((r.get(k) or 1) == 1 for k in ("cp", "pp", "ep")) and not r.get("zero_stage")]
    if len({r.get("tp") or 1 for r in steps}) < 2:
        return ""
    rows = sorted(steps, key=lambda r: (r.get("tp") or 1, bool(r.get("sequence_parallel")), r.get("start_time", "")))
    out = ["| tp | mode | step (ms) | TP bytes per rank and step | exposed TP (ms/step) | activations (rank 0) | "
           "straggler | TP groups |", "|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        tp = r.get("tp") or 1
        tp_bytes = sum(v for k, v in r.items() if k.startswith("bytes.tp.") and isinstance(v, (int, float)))
        exposed = r.get("time.exposed.tp")  # step/time_split, mean over ranks
        mode = "-" if tp == 1 else ("SP" if r.get("sequence_parallel") else "AR")
        span = r.get("span.tp", "") if tp > 1 else "-"
        out.append(f"| {tp} | {mode} | {step_cell('step_time_median', r)} | "
                   f"{human_bytes(tp_bytes) if tp > 1 else '-'} | "
                   f"{'-' if exposed is None else spread.fmt(exposed * 1e3, run_place_ms(r))} | "
                   f"{human_bytes(r.get('mem.activations'))} | {r.get('straggler_rank', '')} | {span or 'unknown'} |")
    return "\nPer tensor-parallel degree:\n\n" + "\n".join(out) + "\n"


# The fields of a plan besides its ZeRO stage.
SAME_BUT_ZERO = ["model", "ranks", "dp", "tp", "cp", "pp", "ep", "microbatches", "vpp", "schedule", "order",
                 "sequence_parallel"]


def zero_side_by_side(steps):
    """The runs differ in ZeRO stage and in nothing else of the plan."""
    return (len({r.get("zero_stage") for r in steps}) > 1
            and len({tuple(r.get(k) for k in SAME_BUT_ZERO) for r in steps}) == 1)
