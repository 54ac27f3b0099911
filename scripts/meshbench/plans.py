"""meshbench.plans: the step runs as parallel plans, for the plan table, --compare and plots.

No HDF5: functions of what reader.read_steps returns (and of scripts/sweep's point records,
plain JSON), shared by scripts/report and scripts/plot. Each step row of reader.step_table
gains the plan's shape and a split of its step time (README, "Reading the report", plan
table):

  plan                 "tp2 x dp2 x pp2 1f1b m=4": the degrees above 1 in the run's rank order
                       (fastest-varying first, so two orders read differently), then vpp,
                       zero, schedule and micro-batches where they matter, "sp"
  time.exposed.<dim>   exposed communication of dim per rank and step (s, mean over ranks):
                       comm exposed_s summed over kinds / steps; for pp only the receives'
                       transfer (step/pipeline recv_transfer_s): the waits for the upstream
                       stage, and sends blocked meanwhile, are the bubble
  time.bubble          the pipeline's idle time per rank and step (s): the mean over ranks of
                       step/pipeline bubble (a share of the pipeline span) x the span (first
                       forward to last backward over all ranks, from step/passes)
  step_time_mean       the mean over the timed steps of each step's slowest rank (step_times):
                       the height of steps.png's bar, since its parts are means over the steps too
  time.compute         step_time_mean minus the two above: compute and whatever else
                       (optimizer, copies); never below 0
  bubble_worst         the largest step/pipeline bubble over ranks (the worst stage), and
                       bubble_worst_rank
  mem_peak             the largest engine_peak over ranks (bytes), mem_peak_rank, rss_peak
                       (the largest process_peak_rss)
  cross_nodes          the dimensions whose groups span more than one node (topology/groups
                       span inter or mixed), in rank order, e.g. "dp,pp"; "none"; "?" without
                       topology
"""
import glob
import json
import math
import os
import re
import shlex

from . import reader

DIMS = ["dp", "tp", "cp", "pp", "ep"]
# The columns this module adds (filters accept them, CSV/JSON carry them).
PLAN_FIELDS = ["plan", "model", "order", "schedule", "vpp", "step_time_mean", "nodes", "ranks_per_node", "bubble_mean",
               "bubble_worst", "bubble_worst_rank", "bubble_theory", "mem_peak", "mem_peak_rank", "rss_peak",
               "cross_nodes", "time.compute", "time.bubble"]
PLAN_NUMERIC = {"vpp", "step_time_mean", "nodes", "ranks_per_node", "bubble_mean", "bubble_worst", "bubble_worst_rank",
                "bubble_theory", "mem_peak", "mem_peak_rank", "rss_peak", "time.compute", "time.bubble"}
# Summary numbers that mean nothing when a run timed no step.
NO_STEP_BLANKS = ["step_time_mean", "step_time_median", "step_time_min", "step_time_p99", "tokens_per_s",
                  "model_flops_per_s", "mfu_measured_peak", "mfu_datasheet", "exposed_comm_fraction",
                  "exposed_comm_fraction_dp", "straggler_rank"]
# What makes two runs the same plan (besides the model): --compare joins on these.
PLAN_KEY = ["model", "ranks", "plan", "global_batch"]
MODEL_ATTRS = ["preset", "layers", "hidden", "heads", "kv_heads", "ffn", "seq", "vocab", "micro_batch",
               "experts", "top_k"]


def order_dims(order):
    """'tp-cp-ep-dp-pp' -> ['tp', 'cp', 'ep', 'dp', 'pp'] (the rank order, fastest first)."""
    got = [d for d in str(order or "").split("-") if d]
    return got + [d for d in DIMS if d not in got]


def plan_label(deg, order="", vpp=1, zero=0, schedule="", microbatches=1, sp=False):
    """The plan as one string; degrees above 1 in rank order ('single' when all are 1)."""
    dims = order_dims(order)
    dims += sorted(d for d in deg if d not in dims)
    parts = [" x ".join(f"{d}{deg[d]}" for d in dims if int(deg.get(d, 1) or 1) > 1) or "single"]
    if int(deg.get("pp", 1) or 1) > 1:
        parts.append(str(schedule or ""))
        if int(vpp or 1) > 1:
            parts.append(f"vpp={vpp}")
    if int(zero or 0) > 0:
        parts.append(f"zero{zero}")
    if int(microbatches or 1) > 1:
        parts.append(f"m={microbatches}")
    if sp:
        parts.append("sp")
    return " ".join(p for p in parts if p)


def _model(attrs):
    """The model shape as text; top_k only for a MoE model (experts > 0)."""
    moe = int(attrs.get("experts", 0) or 0) > 0
    return " ".join(f"{k}={attrs[k]}" for k in MODEL_ATTRS
                    if attrs.get(k) not in (None, "", 0) and (moe or k != "top_k"))


def _span(passes, steps):
    """Mean pipeline span per step (s): earliest forward start to latest backward end, all ranks."""
    lo, hi = {}, {}
    for p in passes:
        s = p["step"]
        if p["phase"] == "F":
            lo[s] = min(lo.get(s, math.inf), p["t_start"])
        elif p["phase"] == "B":
            hi[s] = max(hi.get(s, -math.inf), p["t_end"])
    spans = [hi[s] - lo[s] for s in lo if s in hi and hi[s] > lo[s]]
    return sum(spans) / len(spans) if spans else 0.0


def _time_split(run, row, steps):
    """time.exposed.<dim>, time.bubble, time.compute (seconds per rank and step)."""
    ranks = max(1, int(row.get("ranks") or 1))
    out = {}
    for c in run["comm"]:
        if c["dim"] == "pp" and run["pipeline"]:
            continue
        out[c["dim"]] = out.get(c["dim"], 0.0) + float(c["exposed_s"]) / (steps * ranks)
    pipe = run["pipeline"]
    bubble = 0.0
    if pipe:
        n = len(pipe)
        out["pp"] = sum(float(p["recv_transfer_s"]) for p in pipe) / n
        bubble = sum(float(p["bubble"]) for p in pipe) / n * _span(run["passes"], steps)
    split = {f"time.exposed.{d}": v for d, v in sorted(out.items())}
    split["time.bubble"] = bubble
    t = row["step_time_mean"]
    split["time.compute"] = max(0.0, t - bubble - sum(out.values()))
    return split


def _per_rank_max(memory, category):
    best = None
    for m in memory:
        if m["category"] == category and (best is None or m["measured_bytes"] > best["measured_bytes"]):
            best = m
    return best


def cross_nodes(run, order):
    """'dp,pp' (dimensions whose groups span nodes, rank order), 'none', or '?' (no topology)."""
    spans = run.get("spans") or {}
    if not spans:
        return "?"
    dims = [d for d in spans if d != "world" and spans[d] & {"inter", "mixed"}]
    rank = {d: i for i, d in enumerate(order_dims(order))}
    return ",".join(sorted(dims, key=lambda d: (rank.get(d, len(rank)), d))) or "none"


def plan_rows(runs):
    """reader.step_table(runs), each row with the plan columns (module docstring)."""
    rows = reader.step_table(runs)
    for run, r in zip(runs, rows):
        a, s, f = run["attrs"], run["summary"], run["fields"]
        deg = a.get("degrees") if isinstance(a.get("degrees"), dict) else {}
        order = str(a.get("order", "") or run["run"].get("order", ""))
        steps = max(1, r.get("steps") or 0)
        r.update(order=order, schedule=str(a.get("schedule", "")), vpp=int(a.get("vpp", 1) or 1),
                 model=_model(a), nodes=f["nodes"], ranks_per_node=f["ranks_per_node"],
                 plan=plan_label(deg, order, a.get("vpp", 1), r["zero_stage"], a.get("schedule", ""),
                                 r.get("microbatches"), r.get("sequence_parallel")),
                 bubble_mean=s.get("bubble_measured") if run["pipeline"] else None,
                 bubble_theory=s.get("bubble_theory") if run["pipeline"] else None,
                 cross_nodes=cross_nodes(run, order))
        if run["pipeline"]:
            worst = max(run["pipeline"], key=lambda p: p["bubble"])
            r.update(bubble_worst=float(worst["bubble"]), bubble_worst_rank=int(worst["rank"]))
        peak = _per_rank_max(run["memory"], "engine_peak")
        if peak is not None:
            r.update(mem_peak=float(peak["measured_bytes"]), mem_peak_rank=int(peak["rank"]))
        rss = _per_rank_max(run["memory"], "process_peak_rss")
        if rss is not None:
            r["rss_peak"] = float(rss["measured_bytes"])
        st = run["step_times"]
        if st.ndim == 2 and st.shape[0] and st.shape[1]:
            r["step_time_mean"] = float(st.max(axis=1).mean())
        if not r.get("steps"):
            # No timed step finished (a run stopped in its warm-up): its summary holds no numbers.
            r.update({k: None for k in NO_STEP_BLANKS})
        elif s:
            r.update(_time_split(run, r, steps))
    return rows


def plan_key(r, leave_out=()):
    return tuple(r.get(k) for k in PLAN_KEY if k not in leave_out)


def exposed_dims(rows):
    """The dimensions with a time.exposed column in any row, in the usual rank order."""
    dims = {k.split(".", 2)[2] for r in rows for k in r if k.startswith("time.exposed.")}
    rank = {d: i for i, d in enumerate(order_dims(""))}
    return sorted(dims, key=lambda d: (rank.get(d, len(rank)), d))


def sort_by_throughput(rows):
    """Best tokens/s first; rows without a throughput (failed points) last, by plan."""
    def key(r):
        t = r.get("tokens_per_s")
        ok = isinstance(t, (int, float)) and not math.isnan(t)
        return (0 if ok else 1, -t if ok else 0, str(r.get("plan", "")), r.get("start_time", ""))
    return sorted(rows, key=key)


# --- scripts/sweep's point records ------------------------------------------------------------
_MESH = re.compile(r"\b(dp|tp|cp|pp|ep)=(\d+)")


def _flag(argv, name, default=None):
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


def point_row(rec):
    """A plan row for a step_bench point that left no finished run (scripts/sweep's
    <out>/points/<id>.json): its plan from the recorded command, its status, no numbers."""
    argv = shlex.split(rec.get("cmd", ""))
    mesh = _flag(argv, "--mesh", "") or ""
    deg = {d: int(n) for d, n in _MESH.findall(mesh)}
    order = _flag(argv, "--order", "tp-cp-ep-dp-pp")
    ranks = rec.get("ranks") or _flag(argv, "-n") or _flag(argv, "--ntasks")
    zero = int(_flag(argv, "--zero", 0) or 0)
    m = int(_flag(argv, "--micro-batches", 1) or 1)
    row = {"file": rec.get("result", ""), "run_id": rec.get("id", ""), "binary": "step_bench",
           "tag": _flag(argv, "--tag", ""), "status": str(rec.get("status", "")), "ranks": int(ranks or 0),
           "order": order, "zero_stage": zero, "microbatches": m, "start_time": rec.get("start", ""),
           "plan": plan_label(deg, order, int(_flag(argv, "--vpp", 1) or 1), zero,
                              _flag(argv, "--schedule", "1f1b"), m, "--sp" in argv)}
    row.update({d: deg.get(d, 1) for d in DIMS})
    return row


def failed_points(paths, rows):
    """Point records under the given folders (<dir>/points/*.json) of step_bench points whose
    status is not ok: rows for those whose result file holds no run among rows, and the
    sweep's status written into the rows of those that do (a timeout keeps its partial run).
    Returns (new rows, unreadable record files)."""
    by_file = {os.path.abspath(r["file"]): r for r in rows if r.get("file")}
    out, bad = [], []
    for p in paths:
        if not os.path.isdir(p):
            continue
        for rf in sorted(glob.glob(os.path.join(p, "**", "points", "*.json"), recursive=True)):
            try:
                with open(rf) as fh:
                    rec = json.load(fh)
            except (OSError, ValueError):
                bad.append(rf)
                continue
            if not isinstance(rec, dict) or "step_bench" not in rec.get("cmd", "") or \
                    rec.get("status") in ("ok", "done"):
                continue
            have = by_file.get(os.path.abspath(rec.get("result", "")))
            if have is not None:
                if have.get("status") == "ok":
                    have["status"] = rec["status"]
                continue
            out.append(point_row(rec))
    return out, bad


def family(r, dim="dp"):
    """What a scaling curve holds fixed: the model, the tag and the plan with dim's degree
    taken out (the single-rank run joins the dp family of 'single')."""
    deg = {d: (1 if d == dim else r.get(d, 1)) for d in DIMS}
    shape = plan_label(deg, r.get("order", ""), r.get("vpp", 1), r.get("zero_stage", 0), r.get("schedule", ""),
                       r.get("microbatches", 1), r.get("sequence_parallel"))
    return r.get("model", ""), r.get("tag", ""), shape
