"""meshbench.plans: the step runs as parallel plans, for the plan table, --compare, --baseline
and plots.

No HDF5: functions of what reader.read_steps returns (and of scripts/sweep's point records,
plain JSON), shared by scripts/report and scripts/plot. Each step row of reader.step_table
gains the plan's shape and the run's time split as the binary stored it (docs/report.md, "Reading the
report"; docs/metrics.md; docs/report.md):

  plan                 "tp2 x dp2 x pp2 1f1b m=4": the degrees above 1 in the run's rank order
                       (fastest-varying first, so two orders read differently), then vpp,
                       the cp algorithm, a MoE routing workload, zero, schedule and
                       micro-batches where they matter, "sp"
  tokens_per_step      the global batch's tokens: step attributes global_batch x seq (what
                       step_bench divides by the step time for tokens/s)
  time.step, time.compute, time.exposed.<dim>, time.bubble, time.other
                       step/time_split (seconds per rank and timed step), the mean over ranks
                       of each category: step = compute + exposed + bubble + other holds for
                       every rank, so for the means too. Absent for files written before
                       step/time_split: nothing here re-derives it
  bubble_worst         the largest step/pipeline bubble over ranks (the time split's bubble
                       over that rank's step), and bubble_worst_rank; bubble_mean is the
                       summary's mean over ranks; only with step/time_split (before it the
                       column had another definition)
  mem_peak             the largest engine_peak over ranks (bytes), mem_peak_rank, rss_peak
                       (the largest process_peak_rss)
  mem_worst.<category> the five memory parts of the rank whose parts add up to the most
                       (mem_worst_rank), mem_worst.total their sum, mem_worst_analytic.total
                       that rank's formula for them (NaN where a part has none)
  cross_nodes          the dimensions whose groups span more than one node (topology/groups
                       span inter or mixed), in rank order, e.g. "dp,pp"; "none"; "?" without
                       topology
  pred.step_time, pred.tokens_per_s, pred.bubble, pred.exposed.<dim>, pred.extrapolated,
  pred.calibration, pred.fabric, pred.extrapolated_what
                       a run given --predict CAL.h5: step/predicted as step_bench stored it
                       (seconds, tokens/s, the bubble share, exposed seconds per step per
                       dimension; extrapolated 0/1); absent for a run without it
  _step_samples        (not an output column) each timed step's slowest rank, seconds

plan_groups(rows) gathers the rounds of each plan (the runs with the same PLAN_KEY and tag) and
ranks them by the median of their tokens/s, with the spread (meshbench.spread) and whether
each is separable from the next.
"""
import glob
import json
import math
import os
import re
import shlex

from . import reader, spread

DIMS = ["dp", "tp", "cp", "pp", "ep"]
# The columns this module adds (filters accept them, CSV/JSON carry them).
PLAN_FIELDS = ["plan", "model", "order", "schedule", "vpp", "tokens_per_step", "nodes", "ranks_per_node",
               "bubble_mean", "bubble_worst", "bubble_worst_rank", "bubble_theory", "mem_peak", "mem_peak_rank",
               "rss_peak", "mem_worst_rank", "cross_nodes", "time.step", "time.compute", "time.bubble", "time.other"]
PLAN_NUMERIC = {"vpp", "tokens_per_step", "nodes", "ranks_per_node", "bubble_mean", "bubble_worst",
                "bubble_worst_rank", "bubble_theory", "mem_peak", "mem_peak_rank", "rss_peak", "mem_worst_rank",
                "time.step", "time.compute", "time.bubble", "time.other"}
# Summary numbers that mean nothing when a run timed no step.
NO_STEP_BLANKS = ["step_time_median", "step_time_min", "step_time_p99", "tokens_per_s",
                  "model_flops_per_s", "mfu_measured_peak", "mfu_datasheet", "exposed_comm_fraction",
                  "exposed_comm_fraction_dp", "straggler_rank"]
# What makes two runs the same plan (besides the model): --compare joins on these; with the tag
# (the fabric) they make the rounds of one measurement (plan_groups).
PLAN_KEY = ["model", "ranks", "plan", "global_batch"]
ROUND_KEY = PLAN_KEY + ["tag"]
MODEL_ATTRS = ["preset", "layers", "hidden", "heads", "kv_heads", "ffn", "seq", "vocab", "micro_batch",
               "experts", "top_k"]


def order_dims(order):
    """'tp-cp-ep-dp-pp' -> ['tp', 'cp', 'ep', 'dp', 'pp'] (the rank order, fastest first)."""
    got = [d for d in str(order or "").split("-") if d]
    return got + [d for d in DIMS if d not in got]


def plan_label(deg, order="", vpp=1, zero=0, schedule="", microbatches=1, sp=False, keep=False, cp_algo="",
               routing=""):
    """The plan as one string; degrees above 1 in rank order ('single' when all are 1). keep:
    ZeRO-3 kept its gathered units across the micro-batches ('zero3 keep'; the default under a
    pipeline), so that the two ZeRO-3 choices are two plans. cp_algo: context parallel's
    algorithm, named when cp > 1 ('cp2 ulysses'); routing: a MoE routing workload other than
    the router's own ('learned'), so that plans differing only there are two plans."""
    dims = order_dims(order)
    dims += sorted(d for d in deg if d not in dims)
    parts = [" x ".join(f"{d}{deg[d]}" for d in dims if int(deg.get(d, 1) or 1) > 1) or "single"]
    if int(deg.get("pp", 1) or 1) > 1:
        parts.append(str(schedule or ""))
        if int(vpp or 1) > 1:
            parts.append(f"vpp={vpp}")
    if int(deg.get("cp", 1) or 1) > 1 and cp_algo:
        parts.append(str(cp_algo))
    if routing and routing != "learned":
        parts.append(str(routing))
    if int(zero or 0) > 0:
        parts.append(f"zero{zero}" + (" keep" if int(zero) == 3 and keep else ""))
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


def time_split_means(rows):
    """{category: mean over ranks} of step/time_split rows (rank, category, seconds)."""
    per = {}
    ranks = set()
    for t in rows:
        ranks.add(int(t["rank"]))
        per[t["category"]] = per.get(t["category"], 0.0) + float(t["seconds"])
    return {c: v / len(ranks) for c, v in per.items()} if ranks else {}


def worst_memory_rank(memory):
    """(rank, {part: bytes}, {part: analytic}) of the rank whose MEMORY_PARTS add up to the most
    (the lowest such rank on a tie); None without memory rows."""
    by = {}
    for m in memory:
        if m["category"] in reader.MEMORY_PARTS:
            d = by.setdefault(int(m["rank"]), ({}, {}))
            d[0][m["category"]] = float(m["measured_bytes"])
            d[1][m["category"]] = float(m["analytic_bytes"])
    if not by:
        return None
    rank = max(sorted(by), key=lambda k: sum(by[k][0].values()))
    return rank, by[rank][0], by[rank][1]


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


def predicted_columns(pred):
    """The pred.* columns of a run's step/predicted (reader.read_predicted), as stored."""
    a = pred["attrs"]

    def num(k):
        v = a.get(k)
        return float(v) if isinstance(v, (int, float)) else math.nan
    out = {"pred.step_time": num("step_time_s"), "pred.tokens_per_s": num("tokens_per_s"),
           "pred.bubble": num("bubble"), "pred.extrapolated": int(a.get("extrapolated", 0) or 0),
           "pred.calibration": str(a.get("calibration", "")), "pred.fabric": str(a.get("fabric", "")),
           "pred.extrapolated_what": str(a.get("extrapolated_what", ""))}
    for e in pred["exposed"]:
        out[f"pred.exposed.{e['dim']}"] = float(e["seconds"])
    return out


def plan_rows(runs):
    """reader.step_table(runs), each row with the plan columns (module docstring)."""
    rows = reader.step_table(runs)
    for run, r in zip(runs, rows):
        a, s, f = run["attrs"], run["summary"], run["fields"]
        deg = a.get("degrees") if isinstance(a.get("degrees"), dict) else {}
        order = str(a.get("order", "") or run["run"].get("order", ""))
        r.update(order=order, schedule=str(a.get("schedule", "")), vpp=int(a.get("vpp", 1) or 1),
                 model=_model(a), nodes=f["nodes"], ranks_per_node=f["ranks_per_node"],
                 plan=plan_label(deg, order, a.get("vpp", 1), r["zero_stage"], a.get("schedule", ""),
                                 r.get("microbatches"), r.get("sequence_parallel"), bool(a.get("zero3_keep_params")),
                                 str(a.get("cp_algo", "") or ""),
                                 str(a.get("routing", "") or "") if int(a.get("experts", 0) or 0) > 0 else ""),
                 cross_nodes=cross_nodes(run, order))
        if r.get("compute") == "modelled":  # its own plan group, table row and plot label
            r["plan"] += " [modelled compute]"
        r["plan"] += reader.mode_suffix(a)  # a naive attention or a recomputation: its own group too
        if a.get("global_batch") is not None and a.get("seq") is not None:
            r["tokens_per_step"] = int(a["global_batch"]) * int(a["seq"])
        split = time_split_means(run.get("time_split") or [])
        for c in sorted(split, key=lambda c: (c != "step", c != "compute", not c.startswith("exposed."), c)):
            r[f"time.{c}"] = split[c]
        if run["pipeline"] and split:
            # step/pipeline's bubble is the split's bubble over the rank's step only in files
            # with step/time_split; older files meant another quantity by it: left blank.
            worst = max(run["pipeline"], key=lambda p: p["bubble"])
            r.update(bubble_worst=float(worst["bubble"]), bubble_worst_rank=int(worst["rank"]),
                     bubble_mean=s.get("bubble_measured"))
        if run["pipeline"]:
            r["bubble_theory"] = s.get("bubble_theory")
        peak = _per_rank_max(run["memory"], "engine_peak")
        if peak is not None:
            r.update(mem_peak=float(peak["measured_bytes"]), mem_peak_rank=int(peak["rank"]))
        rss = _per_rank_max(run["memory"], "process_peak_rss")
        if rss is not None:
            r["rss_peak"] = float(rss["measured_bytes"])
        worst_mem = worst_memory_rank(run["memory"])
        if worst_mem is not None:
            rank, parts, analytic = worst_mem
            r["mem_worst_rank"] = rank
            for c in reader.MEMORY_PARTS:
                r[f"mem_worst.{c}"] = parts.get(c, 0.0)
            r["mem_worst.total"] = sum(parts.values())
            r["mem_worst_analytic.total"] = sum(analytic.get(c, math.nan) for c in reader.MEMORY_PARTS)
        if run.get("predicted") is not None:
            r.update(predicted_columns(run["predicted"]))
        st = run["step_times"]
        if st.ndim == 2 and st.shape[0] and st.shape[1]:
            r["_step_samples"] = [float(x) for x in st.max(axis=1)]
        if not r.get("steps"):
            # No timed step finished (a run stopped in its warm-up): its summary holds no numbers.
            r.update({k: None for k in NO_STEP_BLANKS})
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


# --- rounds: the runs of one plan and tag, ranked by their median tokens/s ------------------
def has_numbers(r):
    t = r.get("tokens_per_s")
    return isinstance(t, (int, float)) and not math.isnan(t) and t > 0 and \
        isinstance(r.get("step_time_median"), (int, float)) and r["step_time_median"] > 0


def round_key(r):
    return tuple(r.get(k) for k in ROUND_KEY)


def step_measure(rounds):
    """spread.Measure of the step time over a plan's rounds (rows with numbers): R >= 2, the
    median of the rounds' step_time_median and their min-max; one round, its step_time_median
    and spread.interval of its steps' slowest-rank times."""
    meds = [r["step_time_median"] for r in rounds]
    one = spread.interval(rounds[0].get("_step_samples") or []) if len(rounds) == 1 else None
    if one is not None and math.isnan(one[0]):
        one = None
    return spread.Measure.of_rounds(meds, one)


def rate_measure(rounds, col, step):
    """spread.Measure of a rate stored per run (tokens_per_s, mfu_measured_peak: a constant over
    the step time): R >= 2, the median of the rounds' values and their min-max; one round, its
    value and the step time's interval turned into the rate's (value x median / hi .. / lo)."""
    vals = [r[col] for r in rounds]
    if len(rounds) >= 2:
        return spread.Measure.of_rounds(vals)
    v = vals[0]
    return spread.Measure(v, v * step.med / step.hi, v * step.med / step.lo, 1, step.rule)


def plan_groups(rows):
    """The rounds of each plan (rows with the same ROUND_KEY), best median tokens/s first, groups
    without numbers last. Each group is a dict: the key columns, 'rows' (every run), 'rounds'
    (how many have numbers), 'step', 'tokens', 'mfu' (spread.Measure or None), the time.*
    columns as the median over rounds of each run's means over ranks (as the step time and the
    bubble share: one round whose rank the machine slowed moves a mean by more than the
    others' spread; the medians add up only nearly),
    'status' ('ok' or the rounds' other statuses), 'check' (fail if any round failed),
    'bubble_worst' and 'mem_peak' (the largest over rounds, with the rank), 'bubble_mean' (the
    median over the rounds with numbers of each run's bubble_mean), 'straggler'
    (the rounds' straggler ranks), 'cross_nodes', 'separable' (False when its tokens/s interval
    overlaps the next group's; None for the last and for groups without numbers)."""
    by = {}
    for r in rows:
        by.setdefault(round_key(r), []).append(r)
    groups = []
    for key, rs in by.items():
        rs = sorted(rs, key=lambda r: (r.get("start_time", ""), r.get("run_id", "")))
        g = dict(zip(ROUND_KEY, key))
        first = rs[0]
        for c in ("order", "schedule", "vpp", "zero_stage", "microbatches", "dp", "tp", "cp", "pp", "ep",
                  "sequence_parallel", "tokens_per_step", "cross_nodes"):
            g[c] = first.get(c)
        ok = [r for r in rs if has_numbers(r)]
        g.update(rows=rs, rounds=len(ok), run_ids=[r.get("run_id") for r in rs], step=None, tokens=None, mfu=None)
        if ok:
            g["step"] = step_measure(ok)
            g["tokens"] = rate_measure(ok, "tokens_per_s", g["step"])
            if all(isinstance(r.get("mfu_measured_peak"), (int, float)) for r in ok):
                g["mfu"] = rate_measure(ok, "mfu_measured_peak", g["step"])
            split = [r for r in ok if "time.step" in r]
            if len(split) == len(ok):
                cats = sorted({k for r in split for k in r if k.startswith("time.")})
                for c in cats:
                    g[c] = spread.median([r.get(c, 0.0) for r in split])
        statuses = sorted({str(r.get("status")) for r in rs if r.get("status") != "ok"})
        g["status"] = "ok" if not statuses else ",".join(statuses)
        checks = {str(r.get("check") or "") for r in rs}
        g["check"] = "fail" if "fail" in checks else ("pass" if checks == {"pass"} else ",".join(sorted(checks - {""})))
        bm = [r["bubble_mean"] for r in ok if isinstance(r.get("bubble_mean"), (int, float))]
        if bm:
            g["bubble_mean"] = spread.median(bm)
        bw = [r for r in rs if r.get("bubble_worst") is not None]
        if bw:
            w = max(bw, key=lambda r: r["bubble_worst"])
            g.update(bubble_worst=w["bubble_worst"], bubble_worst_rank=w.get("bubble_worst_rank"))
        mp = [r for r in rs if r.get("mem_peak") is not None]
        if mp:
            w = max(mp, key=lambda r: r["mem_peak"])
            g.update(mem_peak=w["mem_peak"], mem_peak_rank=w.get("mem_peak_rank"))
        strag = sorted({r.get("straggler_rank") for r in ok if r.get("straggler_rank") is not None})
        g["straggler"] = ",".join(str(x) for x in strag)
        g["time_split_missing"] = sum(1 for r in ok if "time.step" not in r)
        groups.append(g)
    groups.sort(key=lambda g: (g["tokens"] is None, -(g["tokens"].med if g["tokens"] else 0), str(g.get("plan")),
                               str(g.get("tag"))))
    for i, g in enumerate(groups):
        nxt = groups[i + 1] if i + 1 < len(groups) else None
        g["separable"] = None if g["tokens"] is None or nxt is None or nxt["tokens"] is None \
            else not g["tokens"].overlaps(nxt["tokens"])
    return groups


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
                              _flag(argv, "--schedule", "1f1b"), m, "--sp" in argv, False,
                              _flag(argv, "--cp-algo", "ring"), _flag(argv, "--routing", ""))}
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
