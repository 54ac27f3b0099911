"""meshbench.regression: scripts/report --baseline OLD --threshold 5%: every collective point
and step plan of the new files matched with the baseline's (by point or plan, size and tag),
old and new as the median of their rounds with their spread, the ratio new/old with its spread,
and a verdict per match: slower (beyond the threshold and outside the noise: exit 1), faster,
within noise, within threshold. With one round the spread is that run's own steps or
iterations (meshbench.spread.interval).
"""
import math
import re
import sys

from . import plans, reader, spread
from .report_collectives import IDENTITY
from .report_format import HEADERS, NUMERIC, md_table, to_csv, to_json
from .report_steps import oversubscribed_note
from .tables import apply_filters, fmt_size

# The statistic over ranks that a collective point's t_median uses (its rank_stat attribute).
RANK_STATS = {"max": lambda a: a.max(axis=1), "avg": lambda a: a.mean(axis=1), "min": lambda a: a.min(axis=1),
              "rank0": lambda a: a[:, 0]}


def parse_threshold(text):
    """'5%' -> 0.05; anything else (a bare number, a negative, NaN) is bad usage."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*%\s*", str(text))
    if not m:
        raise ValueError(f"--threshold takes a percentage such as 5%, got '{text}'")
    return float(m.group(1)) / 100


def iteration_times(r):
    """A collective point's per-iteration times (its stored samples [iters, ranks], the
    statistic over ranks its t_median uses: rank_stat); iterations not run (NaN) left out."""
    import numpy as np
    a = np.asarray(r.get("samples"), dtype=float)
    if a.ndim != 2 or not a.size:
        return []
    a = a[np.all(np.isfinite(a), axis=1)]
    return list(RANK_STATS.get(r.get("rank_stat") or "max", RANK_STATS["max"])(a)) if len(a) else []


def collective_measures(rows):
    """{IDENTITY key: (rows, spread.Measure of t_median)}: the rounds of each point (its runs),
    or with one round the spread of its iterations (spread.interval)."""
    by = {}
    for r in rows:
        if isinstance(r.get("t_median"), float) and r["t_median"] > 0:
            by.setdefault(tuple(r.get(c) for c in IDENTITY), []).append(r)
    out = {}
    for k, rs in by.items():
        one = None
        if len(rs) == 1:
            one = spread.interval(iteration_times(rs[0]))
            one = None if math.isnan(one[0]) else one
        out[k] = (rs, spread.Measure.of_rounds([r["t_median"] for r in rs], one))
    return out


def verdict(old, new, threshold):
    """(ratio Measure new/old, verdict): 'slower' when the median ratio exceeds 1 + threshold and
    new's interval lies wholly above old's (outside the noise); 'faster' the mirror (below
    1 - threshold, wholly below); 'within noise' beyond the threshold but overlapping; else
    'within threshold'."""
    ratio = spread.Measure(new.med / old.med, new.lo / old.hi, new.hi / old.lo, min(old.n, new.n), "")
    if ratio.med > 1 + threshold:
        return ratio, "slower" if new.lo > old.hi else "within noise"
    if ratio.med < 1 - threshold:
        return ratio, "faster" if new.hi < old.lo else "within noise"
    return ratio, "within threshold"


def regression_rows(kind, old, new, threshold, keycols):
    """Joined rows of one kind: old and new {key: (..., Measure)} matched on key."""
    out = []
    def order(k):  # numbers (sizes) as numbers: 8 before 1M
        return tuple((0, float(x), "") if isinstance(x, (int, float)) else (1, 0.0, str(x)) for x in k)
    for k in sorted(set(old) & set(new), key=order):
        mo, mn = old[k][1], new[k][1]
        ratio, v = verdict(mo, mn, threshold)
        j = {"kind": kind}
        j.update(zip(keycols, k))
        j.update(old=mo.med, old_lo=mo.lo, old_hi=mo.hi, old_spread=mo.rule, new=mn.med, new_lo=mn.lo,
                 new_hi=mn.hi, new_spread=mn.rule, ratio=ratio.med, ratio_lo=ratio.lo, ratio_hi=ratio.hi, verdict=v)
        j["_m"] = (mo, mn, ratio)
        out.append(j)
    return out


def regression_md(rows, title, keycols, unit, k):
    """Markdown of one kind's joined rows: the key columns that differ between rows (always the
    collective and size, or the plan and global batch), old and new with their spread, the
    ratio with its spread and the verdict."""
    if not rows:
        return ""
    always = ("collective", "bytes", "plan", "global_batch")
    show = [c for c in keycols if c in always or len({str(r.get(c)) for r in rows}) > 1]
    if "plan" in show:
        show = [c for c in ("plan", "ranks", "model", "global_batch", "tag") if c in show]
    cols = [(HEADERS.get(c, c) if c != "global_batch" else "global batch",
             lambda r, c=c: fmt_size(r[c]) if c == "bytes" else str(r.get(c, "")),
             c in NUMERIC or c in ("ranks", "global_batch")) for c in show]
    cols += [(f"old ({unit})", lambda r: spread.fmt_measure(r["_m"][0], k), True),
             (f"new ({unit})", lambda r: spread.fmt_measure(r["_m"][1], k), True),
             ("time new/old", lambda r: spread.fmt_measure(r["_m"][2]), True),
             ("verdict", lambda r: r["verdict"], False)]
    fixed = {c: str(rows[0].get(c)) for c in keycols if c not in show and rows[0].get(c) not in (None, "")}
    head = f"{title}" + (f" ({', '.join(f'{c} {v}' for c, v in fixed.items() if c in ('tag', 'ranks', 'backend'))})"
                         if fixed else "")
    return f"{head}:\n\n" + md_table(cols, rows) + "\n"


def regression(args, threshold, new_rows, new_steps):
    """(exit code, text) of --baseline: every collective point and step plan of the new files
    matched with the baseline's by plan (or point), size and fabric (tag)."""
    old_rows, bad_a = reader.load_collectives(args.baseline, with_samples=True, quiet=False)
    old_runs, bad_b = reader.load_steps(args.baseline, quiet=True)
    old_rows = apply_filters(old_rows, args.where)
    old_steps = apply_filters(plans.plan_rows(old_runs), args.where)
    if args.table == "steps":
        old_rows = new_rows = []
    if args.table == "collectives":
        old_steps = new_steps = []
    coll = regression_rows("collective", collective_measures(old_rows), collective_measures(new_rows), threshold,
                           IDENTITY)

    def step_measures(steps):
        return {plans.round_key(g): (g, g["step"]) for g in plans.plan_groups(steps) if g["step"] is not None}
    so, sn = step_measures(old_steps), step_measures(new_steps)
    stp = regression_rows("step", so, sn, threshold, plans.ROUND_KEY)
    rows = coll + stp
    bad = sorted(set(bad_a) | set(bad_b))
    if not rows:
        print(f"report: --baseline: nothing to judge: no collective point or step plan of {' '.join(args.paths)} "
              f"matches one of {' '.join(args.baseline)} (by plan or point, size and tag)", file=sys.stderr)
        return 1, ""
    slower = [r for r in rows if r["verdict"] == "slower"]
    thr = f"{100 * threshold:g}%"
    if args.format != "md":
        cols = args.columns.split(",") if args.columns else \
            ["kind"] + [c for c in IDENTITY + plans.ROUND_KEY if any(c in r for r in rows)] + \
            ["old", "old_lo", "old_hi", "old_spread", "new", "new_lo", "new_hi", "new_spread", "ratio", "ratio_lo",
             "ratio_hi", "verdict"]
        cols = list(dict.fromkeys(cols))
        text = to_csv(rows, cols) if args.format == "csv" else to_json(rows, cols)
    else:
        text = (f"Against the baseline {' '.join(args.baseline)}, threshold {thr}: a match is slower when its "
                f"time new/old exceeds {1 + threshold:g} and its new interval lies wholly above the old one "
                "(outside the noise).\n\n")
        text += regression_md(coll, "Collectives, time per call", IDENTITY, "us", 1e6)
        text += regression_md(stp, "Step runs, step time", plans.ROUND_KEY, "ms", 1e3)
        notes = [f"{len(slower)} of {len(rows)} match(es) slower beyond {thr} and outside the noise: "
                 + ("exit 1" if slower else "exit 0")]
        for r in slower:
            what = r.get("plan") or f"{r.get('collective')} {fmt_size(r.get('bytes') or 0)}"
            notes.append(f"slower: {what} ({r.get('tag') or 'untagged'}): time x{r['ratio']:.3g}")
        notes.append("old, new: the median of the rounds (runs of the same point or plan, size and tag: step runs "
                     "their step_time_median, collectives their t_median), in parentheses their min-max; with one "
                     "round the spread of its steps or iterations (min-max; the 95% CI of the median from 6 on); "
                     "time new/old: the ratio of the medians, in parentheses new lo/old hi to new hi/old lo")
        n_old = len(collective_measures(old_rows)) + len(so)
        n_new = len(collective_measures(new_rows)) + len(sn)
        if n_old > len(rows) or n_new > len(rows):
            notes.append(f"{n_new - len(rows)} new and {n_old - len(rows)} baseline point(s) or plan(s) without a "
                         "match (not judged)")
        notes += oversubscribed_note([r for g in (new_steps, old_steps) for r in g])
        text += "\n".join("- " + n for n in notes) + "\n"
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    if bad:
        print(f"report: --baseline: {len(bad)} unreadable file(s): {' '.join(bad)}", file=sys.stderr)
    return (1 if slower or bad else 0), text
